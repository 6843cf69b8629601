package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// TestContractsThroughGateway serves the example contracts from a real
// server's --contracts directory and calls book-extract with `berth
// contract run` and the client, through the gateway, on a real service
// (the fake model server, scripted) on a real agent: a fenced reply, a
// reply that breaks the schema and is mended on the retry, and one that
// is not JSON; then a contract stored with `berth contract add` outlives
// the server's restart.
func TestContractsThroughGateway(t *testing.T) {
	t.Parallel()
	examples, err := filepath.Abs("../examples/contracts")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "script.json")
	steps := []map[string]any{
		{"content": "Here is the book:\n```json\n{\"title\": \"Dune\", \"author\": \"Frank Herbert\"}\n```"},
		{"content": `{"title": "Dune"}`}, // no author: the retry mends it
		{"content": `{"title": "Dune", "author": "Frank Herbert"}`},
		{"content": "I cannot read this cover."},
	}
	data, _ := json.Marshal(steps)
	if err := os.WriteFile(script, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cover := filepath.Join(dir, "cover.png")
	var img bytes.Buffer
	if err := png.Encode(&img, image.NewRGBA(image.Rect(0, 0, 2000, 3000))); err != nil { // downscaled to 1280 on the way
		t.Fatal(err)
	}
	if err := os.WriteFile(cover, img.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	cl := newCluster(t, "--templates", fakeLLMTemplate(t), "--contracts", examples)
	cl.addAgent("gpu1", "--ports", "18400-18499")
	id := serveFake(cl, "vlm", "Qwen/Qwen2-VL-7B-Instruct", "--warmup 100ms --script "+script)
	cl.eventually(30*time.Second, "the service ready", func() bool {
		svc := cl.service(id)
		return svc != nil && svc.Phase == berth.PhaseReady
	})

	berthCLI := func(args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(berthBin, append(args, "--server", cl.url)...)
		cmd.Env = append(os.Environ(), "BERTH_TOKEN=", "BERTH_CREDENTIALS="+filepath.Join(dir, "none.json"))
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), exitCode(err)
	}

	out, errOut, code := berthCLI("contracts")
	if code != 0 || !strings.Contains(out, "book-extract") || !strings.Contains(out, "book-condition") {
		t.Fatalf("berth contracts: exit %d\n%s%s", code, out, errOut)
	}

	// 1: the fenced reply is reduced to its object.
	out, errOut, code = berthCLI("contract", "run", "book-extract", "--image", cover, "--input", "hint=first edition")
	var got map[string]string
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got["title"] != "Dune" || got["author"] != "Frank Herbert" {
		t.Fatalf("berth contract run: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// 2 and 3: the reply breaks the schema; the retry mends it.
	res, status, err := cl.c.RunContract(context.Background(), "book-extract", &berth.ContractRequest{Images: []string{"data:image/png;base64," + base64.StdEncoding.EncodeToString(img.Bytes())}})
	if err != nil || status != 200 || res.Attempts != 2 || string(res.Output) != `{"title":"Dune","author":"Frank Herbert"}` {
		t.Fatalf("RunContract = %+v, %d, %v; want the output after a retry", res, status, err)
	}

	// 4: no JSON at all: parse_failed, with the raw reply; exit 1.
	out, errOut, code = berthCLI("contract", "run", "book-extract", "--image", cover)
	if code != 1 || out != "" || !strings.Contains(errOut, "parse_failed") || !strings.Contains(errOut, "I cannot read this cover.") {
		t.Fatalf("a reply with no JSON: exit %d, stdout %q, stderr %q; want 1 and parse_failed with the raw reply", code, out, errOut)
	}
	// A request that breaks the contract never reaches the model.
	_, errOut, code = berthCLI("contract", "run", "book-extract")
	if code != 2 || !strings.Contains(errOut, "input_rejected") {
		t.Fatalf("no image: exit %d, stderr %q; want 2, input_rejected", code, errOut)
	}

	// A contract stored through the API outlives a restart.
	receipt := filepath.Join(dir, "receipt.yaml")
	doc := "name: receipt\nmodel: Qwen/Qwen2-VL-7B-Instruct\nprompt: \"Total: {{.Schema}}\"\nimages: {min: 1, max: 1}\n" +
		"output: {type: object, required: [total], properties: {total: {type: number}}}\n"
	if err := os.WriteFile(receipt, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := berthCLI("contract", "add", receipt); code != 0 || !strings.Contains(out, "contract receipt added") {
		t.Fatalf("berth contract add: exit %d\n%s%s", code, out, errOut)
	}
	cl.server.stop()
	cl.startServer()
	out, errOut, code = berthCLI("contracts")
	if code != 0 || !strings.Contains(out, "receipt") || !strings.Contains(out, "api") {
		t.Fatalf("berth contracts after a restart: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := berthCLI("contract", "rm", "book-extract"); code == 0 || !strings.Contains(errOut, "book-extract.yaml") {
		t.Fatalf("rm of a file's contract: exit %d, %s; want a refusal naming the file", code, errOut)
	}
}
