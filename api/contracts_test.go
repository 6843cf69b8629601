package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/api/apitest"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/contract"
	"github.com/berth-dev/berth/store"
)

// stored is a contract document as an admin posts it.
const stored = `name: receipt
model: Qwen/Qwen2-VL-7B-Instruct
prompt: "Total of this receipt as JSON: {{.Schema}}"
images: {min: 1, max: 1, max_bytes: 1MiB}
output: {type: object, required: [total], properties: {total: {type: number}}}
`

func TestContractsAPI(t *testing.T) {
	auditPath := filepath.Join(t.TempDir(), "audit.log")
	st, ctl, sec := startController(t, t.TempDir(), func(st store.Store) *api.Security {
		return apitest.SecurityWithAudit(t, st, "", auditPath)
	})
	files, err := contract.LoadDir("../examples/contracts")
	if err != nil {
		t.Fatal(err)
	}
	reg, err := contract.NewRegistry(context.Background(), files, st)
	if err != nil {
		t.Fatal(err)
	}
	h := api.New(ctl, st, sec, nil)
	h.Contracts = reg
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	s := &server{t: t, url: hs.URL, ctl: ctl, st: st, sec: sec}
	s.token = apitest.Token(t, sec, "root", auth.RoleAdmin, "")
	user := apitest.Token(t, sec, "alice", auth.RoleUser, "")

	expect := func(method, path, body, token string, want int) []byte {
		t.Helper()
		status, _, data := s.doAuth(method, path, body, token)
		if status != want {
			t.Fatalf("%s %s: status %d, want %d: %s", method, path, status, want, data)
		}
		return data
	}
	names := func() []string {
		t.Helper()
		var l berth.ContractList
		if err := json.Unmarshal(expect("GET", "/api/v1/contracts", "", user, 200), &l); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range l.Data {
			out = append(out, c.Name+":"+c.DefinedIn)
		}
		return out
	}
	if got := strings.Join(names(), " "); got != "book-condition:file book-extract:file" {
		t.Fatalf("contracts = %s", got)
	}

	expect("POST", "/api/v1/contracts", stored, user, http.StatusForbidden)
	var info berth.ContractInfo
	if err := json.Unmarshal(expect("POST", "/api/v1/contracts", stored, s.token, http.StatusCreated), &info); err != nil {
		t.Fatal(err)
	}
	if info.Name != "receipt" || info.DefinedIn != "api" || info.Images.MaxBytes != 1<<20 {
		t.Errorf("created %+v", info)
	}
	if got := strings.Join(names(), " "); got != "book-condition:file book-extract:file receipt:api" {
		t.Fatalf("contracts after a POST = %s", got)
	}
	// Refusals change nothing.
	expect("POST", "/api/v1/contracts", stored, s.token, http.StatusConflict)
	fileName := strings.Replace(stored, "name: receipt", "name: book-extract", 1)
	if data := expect("POST", "/api/v1/contracts", fileName, s.token, http.StatusConflict); !strings.Contains(string(data), "book-extract.yaml") {
		t.Errorf("a name a file defines: %s; want the file named", data)
	}
	data := expect("POST", "/api/v1/contracts", strings.Replace(stored, "type: number", "type: nummer", 1), s.token, http.StatusBadRequest)
	var eb berth.ErrorBody
	if err := json.Unmarshal(data, &eb); err != nil || eb.Error.Field != "output" {
		t.Errorf("a bad schema: %s; want field output", data)
	}
	expect("PUT", "/api/v1/contracts/other", stored, s.token, http.StatusBadRequest)
	expect("PUT", "/api/v1/contracts/nope", strings.Replace(stored, "receipt", "nope", 1), s.token, http.StatusNotFound)
	expect("DELETE", "/api/v1/contracts/book-extract", "", s.token, http.StatusConflict)

	replaced := strings.Replace(stored, "max: 1,", "max: 3,", 1)
	expect("PUT", "/api/v1/contracts/receipt", replaced, s.token, http.StatusOK)
	if err := json.Unmarshal(expect("GET", "/api/v1/contracts/receipt", "", user, 200), &info); err != nil || info.Images.Max != 3 {
		t.Errorf("after PUT: %+v, %v; want 3 images", info.Images, err)
	}
	rec, err := st.Contract(context.Background(), "receipt")
	if err != nil || rec.Source != replaced || rec.CreatedBy != "root" {
		t.Errorf("stored %+v, %v", rec, err)
	}

	// The stored contract outlives the server: a new registry on the same
	// store has it, and refuses a file of the same name, naming both.
	again, err := contract.NewRegistry(context.Background(), files, st)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := again.Get(context.Background(), "receipt"); err != nil || c.Images.Max != 3 {
		t.Errorf("after a restart: %v, %v", c, err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "r.yaml"), []byte(stored), 0o644); err != nil {
		t.Fatal(err)
	}
	clash, err := contract.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := contract.NewRegistry(context.Background(), clash, st); err == nil ||
		!strings.Contains(err.Error(), "r.yaml") || !strings.Contains(err.Error(), "stored through the API by root") {
		t.Errorf("a file naming a stored contract: %v; want an error naming both", err)
	}

	expect("DELETE", "/api/v1/contracts/receipt", "", user, http.StatusForbidden)
	expect("DELETE", "/api/v1/contracts/receipt", "", s.token, http.StatusNoContent)
	expect("DELETE", "/api/v1/contracts/receipt", "", s.token, http.StatusNotFound)
	expect("GET", "/api/v1/contracts/receipt", "", user, http.StatusNotFound)

	log, err := os.ReadFile(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, action := range []string{"contract.created", "contract.replaced", "contract.deleted"} {
		if strings.Count(string(log), action) != 1 {
			t.Errorf("audit log has %d %s, want 1:\n%s", strings.Count(string(log), action), action, log)
		}
	}
}
