package contract_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"image"
	"image/jpeg"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/contract"
	"github.com/berth-dev/berth/gateway"
)

// The contract overhead (docs/performance.md, "Extraction contracts"):
// a call of a contract through the gateway against the same chat
// completion sent to the fake model server directly, both over loopback
// HTTP, and the cost of one image scaled down.
//
//	go test ./contract -run '^$' -bench 'Direct|ThroughGateway' -benchtime 2000x
//	go test ./contract -run '^$' -bench ImageDownscale -benchtime 10x

const benchReply = `{"title":"Dune"}`

func benchFake(b *testing.B) string {
	return startFake(b, "m", []map[string]any{{"content": "```json\n" + benchReply + "\n```"}})
}

// BenchmarkDirect posts a chat completion to the fake model server.
func BenchmarkDirect(b *testing.B) {
	url := benchFake(b)
	body := `{"model":"m","messages":[{"role":"user","content":"Title of a novel as JSON"}]}`
	b.ResetTimer()
	for range b.N {
		post200(b, url+"/v1/chat/completions", body)
	}
}

// post200 posts body to url and reads the answer, which must be 200.
func post200(b *testing.B, url, body string) {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatal(resp.Status, buf.String())
	}
}

// BenchmarkThroughGateway calls a contract through the gateway on the
// same fake: render, route, reduce, validate.
func BenchmarkThroughGateway(b *testing.B) {
	url := benchFake(b)
	c, err := contract.Parse("t.yaml", []byte(scripted))
	if err != nil {
		b.Fatal(err)
	}
	reg, err := contract.NewRegistry(context.Background(), map[string]*contract.Contract{"t": c}, nil)
	if err != nil {
		b.Fatal(err)
	}
	g := gateway.New(gateway.Config{Cluster: oneReplica{"m", url},
		Authenticate: func(*http.Request) (*gateway.Caller, error) { return &gateway.Caller{Name: "bench"}, nil }})
	contract.Mount(g, reg)
	hs := httptest.NewServer(g)
	defer hs.Close()
	b.ResetTimer()
	for range b.N {
		post200(b, hs.URL+"/v1/contracts/t", `{"inputs":{"hint":"a novel"}}`)
	}
}

// BenchmarkImageDownscale checks and scales one 3000x2000 JPEG photo to
// 1280 pixels, as a contract with max_side 1280 does before sending it.
func BenchmarkImageDownscale(b *testing.B) {
	c, err := contract.Parse("t.yaml", []byte(strings.Replace(scripted, "timeout: 1s",
		"timeout: 1s\nimages: {max: 1, max_bytes: 16MiB, max_side: 1280}", 1)))
	if err != nil {
		b.Fatal(err)
	}
	img := image.NewRGBA(image.Rect(0, 0, 3000, 2000)) // smooth, as a photo is, not noise
	for y := range 2000 {
		for x := range 3000 {
			o := img.PixOffset(x, y)
			img.Pix[o], img.Pix[o+1], img.Pix[o+2], img.Pix[o+3] = uint8(x*255/3000), uint8(y*255/2000), uint8((x+y)%256), 255
		}
	}
	var jb bytes.Buffer
	if err := jpeg.Encode(&jb, img, &jpeg.Options{Quality: 85}); err != nil {
		b.Fatal(err)
	}
	req := &berth.ContractRequest{Inputs: map[string]string{"hint": "x"}, Images: []string{base64.StdEncoding.EncodeToString(jb.Bytes())}}
	models := stopModels{}
	b.ResetTimer()
	for range b.N {
		if res := c.Run(context.Background(), models, req); res.Error == nil || res.Error.Type != berth.ContractUpstreamHTTPError {
			b.Fatal(res.Error)
		}
	}
}

// stopModels answers every request with 503 at once: the benchmark
// measures what happens before the model is called.
type stopModels struct{}

func (stopModels) ChatCompletion(context.Context, string, []byte) (*contract.Reply, error) {
	return &contract.Reply{Status: 503, Body: []byte("{}")}, nil
}
