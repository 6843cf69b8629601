package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/api/apitest"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/controller"
	"github.com/berth-dev/berth/store"
)

// poolServer is a server with cloud pools on its real SQLite store, an
// audit log, and tokens of each role.
type poolServer struct {
	*server
	pools     *api.Pools
	auditPath string
	tokens    map[auth.Role]string
}

// provisionFunc is a Provisioner as a function.
type provisionFunc func(ctx context.Context, pool *berth.Pool) (*berth.Instance, error)

func (f provisionFunc) Provision(ctx context.Context, pool *berth.Pool) (*berth.Instance, error) {
	return f(ctx, pool)
}

func startPoolServer(t *testing.T) *poolServer {
	t.Helper()
	auditPath := filepath.Join(t.TempDir(), "audit.log")
	st, ctl, sec := startController(t, t.TempDir(), func(st store.Store) *api.Security {
		return apitest.SecurityWithAudit(t, st, "", auditPath)
	})
	h := api.New(ctl, st, sec, nil)
	h.Pools = &api.Pools{Store: st, Keys: sec.Secrets}
	s, tokens := serveWithRoles(t, h, st, ctl, sec)
	return &poolServer{server: s, pools: h.Pools, auditPath: auditPath, tokens: tokens}
}

// serveWithRoles serves h, ctl's on st, until t ends, and returns it
// with an admin's token and a token of each role.
func serveWithRoles(t *testing.T, h *api.Server, st store.Store, ctl *controller.Controller, sec *api.Security) (*server, map[auth.Role]string) {
	t.Helper()
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	s := &server{t: t, url: hs.URL, ctl: ctl, st: st, sec: sec}
	s.token = apitest.Token(t, sec, "root", auth.RoleAdmin, "")
	tokens := map[auth.Role]string{auth.RoleAdmin: s.token}
	for _, role := range []auth.Role{auth.RoleOperator, auth.RoleUser, auth.RoleViewer, auth.RolePeer, auth.RoleAgent} {
		worker := ""
		if role == auth.RoleAgent {
			worker = "host-1"
		}
		tokens[role] = apitest.Token(t, sec, "someone-"+string(role), role, worker)
	}
	return s, tokens
}

// readAudit returns the audit log at path.
func readAudit(t *testing.T, path string) []byte {
	t.Helper()
	log, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return log
}

// goodPool is a valid pool body with key as its API key.
func goodPool(key string) map[string]any {
	return map[string]any{
		"provider": "vast", "gpu_type": "RTX 4090", "gpus": 1, "max_instances": 4, "max_price": 0.6,
		"idle_timeout": "10m", "strictness": "balanced", "url": "http://127.0.0.1:9/", "api_key": key,
		"queues": []string{"train"}, "labels": map[string]string{"cloud": "vast"},
	}
}

func body(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// errorField returns the field an error answer names.
func errorField(t *testing.T, data []byte) string {
	t.Helper()
	var eb berth.ErrorBody
	if err := json.Unmarshal(data, &eb); err != nil || eb.Error == nil {
		t.Fatalf("not an error body: %s", data)
	}
	return eb.Error.Field
}

func (s *poolServer) storedPools() []*berth.Pool {
	s.t.Helper()
	pools, err := s.st.Pools(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	return pools
}

func (s *poolServer) auditLog() []byte {
	s.t.Helper()
	return readAudit(s.t, s.auditPath)
}

// Each bad field is a 400 naming it, and nothing is stored.
func TestPoolValidation(t *testing.T) {
	t.Parallel()
	s := startPoolServer(t)
	for _, tc := range []struct {
		name, field string
		edit        func(map[string]any)
	}{
		{"bad-name", "name", func(b map[string]any) { b["name"] = "other" }},
		{"Upper", "name", nil},
		{"p", "provider", func(b map[string]any) { b["provider"] = "aws" }},
		{"p", "provider", func(b map[string]any) { delete(b, "provider") }},
		{"p", "gpu_type", func(b map[string]any) { b["gpu_type"] = " " }},
		{"p", "gpus", func(b map[string]any) { b["gpus"] = 0 }},
		{"p", "gpus", func(b map[string]any) { b["gpus"] = 17 }},
		{"p", "max_instances", func(b map[string]any) { b["max_instances"] = 0 }},
		{"p", "max_instances", func(b map[string]any) { b["max_instances"] = 1001 }},
		{"p", "max_price", func(b map[string]any) { b["max_price"] = 0 }},
		{"p", "max_price", func(b map[string]any) { b["max_price"] = -1 }},
		{"p", "max_price", func(b map[string]any) { b["max_price"] = "0.60/h" }},
		{"p", "idle_timeout", func(b map[string]any) { delete(b, "idle_timeout") }},
		{"p", "idle_timeout", func(b map[string]any) { b["idle_timeout"] = "soon" }},
		{"p", "strictness", func(b map[string]any) { b["strictness"] = "lax" }},
		{"p", "url", func(b map[string]any) { b["url"] = "ftp://127.0.0.1/" }},
		{"p", "url", func(b map[string]any) { b["url"] = "127.0.0.1:9" }},
		{"p", "queues", func(b map[string]any) { b["queues"] = []string{"Bad Queue"} }},
		{"p", "labels", func(b map[string]any) { b["labels"] = map[string]string{"": "x"} }},
		{"p", "api_key", func(b map[string]any) { delete(b, "api_key") }},
		{"p", "api_key", func(b map[string]any) { b["api_key"] = strings.Repeat("k", berth.MaxPoolAPIKey+1) }},
		{"p", "sealed_api_key", func(b map[string]any) { b["sealed_api_key"] = "AAAA" }},
		{"p", "workload", func(b map[string]any) { b["workload"] = "triton" }},
		{"p", "model", func(b map[string]any) { b["workload"] = "vllm" }},
		{"p", "model", func(b map[string]any) { b["model"] = "Qwen/Qwen2.5-0.5B-Instruct" }},
		{"p", "port", func(b map[string]any) { b["workload"], b["model"], b["port"] = "vllm", "m", 22 }},
		{"p", "max_model_len", func(b map[string]any) { b["workload"], b["model"], b["max_model_len"] = "vllm", "m", -5 }},
	} {
		b := goodPool("vast-secret-key")
		if tc.edit != nil {
			tc.edit(b)
		}
		status, _, data := s.do("PUT", "/api/v1/pools/"+tc.name, body(t, b))
		if status != http.StatusBadRequest || errorField(t, data) != tc.field {
			t.Errorf("PUT %s %s: %d %s; want 400 naming %s", tc.name, body(t, b), status, data, tc.field)
		}
	}
	if pools := s.storedPools(); len(pools) != 0 {
		t.Errorf("stored after bad input: %+v", pools)
	}
	if log := s.auditLog(); bytes.Contains(log, []byte("pool.set")) {
		t.Errorf("bad input audited as a change:\n%s", log)
	}
}

// A vLLM pool's workload fields are stored, answered with the port
// defaulted, and audited; an agent pool answers workload agent.
func TestPoolVLLMWorkload(t *testing.T) {
	t.Parallel()
	s := startPoolServer(t)
	b := goodPool("vast-secret-key")
	b["workload"], b["model"], b["max_model_len"] = "vllm", "Qwen/Qwen2.5-0.5B-Instruct", 4096
	if status, _, data := s.do("PUT", "/api/v1/pools/llm", body(t, b)); status != http.StatusOK {
		t.Fatalf("PUT a vllm pool: %d %s", status, data)
	}
	if status, _, data := s.do("PUT", "/api/v1/pools/agents", body(t, goodPool("vast-secret-key"))); status != http.StatusOK {
		t.Fatalf("PUT an agent pool: %d %s", status, data)
	}
	var list berth.PoolList
	if status, _, data := s.do("GET", "/api/v1/pools", ""); status != http.StatusOK || json.Unmarshal(data, &list) != nil || len(list.Pools) != 2 {
		t.Fatalf("GET pools: %d %s", status, data)
	}
	agents, llm := list.Pools[0], list.Pools[1]
	if llm.Workload != berth.WorkloadVLLM || llm.Model != "Qwen/Qwen2.5-0.5B-Instruct" || llm.MaxModelLen != 4096 || llm.Port != berth.DefaultVLLMPort {
		t.Errorf("the vllm pool answered %+v; want its workload, model, max model len and port 8000", llm.Pool)
	}
	if agents.Workload != berth.WorkloadAgent || agents.Model != "" || agents.Port != 0 {
		t.Errorf("the agent pool answered %+v; want workload agent and no model or port", agents.Pool)
	}
	if log := s.auditLog(); !bytes.Contains(log, []byte(`"model":"Qwen/Qwen2.5-0.5B-Instruct"`)) || !bytes.Contains(log, []byte(`"workload":"vllm"`)) {
		t.Errorf("audit log lacks the vllm pool's workload:\n%s", log)
	}
}

func TestPoolSetGetDelete(t *testing.T) {
	t.Parallel()
	s := startPoolServer(t)
	const key = "vast-secret-key-1"
	b := goodPool(key)
	delete(b, "strictness") // balanced by default
	status, _, data := s.do("PUT", "/api/v1/pools/rent", body(t, b))
	if status != http.StatusOK {
		t.Fatalf("PUT: %d %s", status, data)
	}
	if bytes.Contains(data, []byte(key)) || bytes.Contains(data, []byte("api_key\":\"")) {
		t.Errorf("PUT answered the key: %s", data)
	}
	var info berth.PoolInfo
	if err := json.Unmarshal(data, &info); err != nil {
		t.Fatal(err)
	}
	if info.Name != "rent" || info.Strictness != berth.StrictnessBalanced || !info.APIKeySet || info.CreatedAt.IsZero() ||
		time.Duration(info.IdleTimeout) != 10*time.Minute || info.MaxPrice != 0.6 {
		t.Errorf("PUT answered %+v", info)
	}

	// Stored sealed under the pool's name, never in the clear.
	stored := s.storedPools()
	if len(stored) != 1 || stored[0].APIKey != "" || bytes.Contains(stored[0].SealedAPIKey, []byte(key)) {
		t.Fatalf("stored %+v", stored)
	}
	if got, err := s.sec.Secrets.OpenPoolKey("rent", stored[0].SealedAPIKey); err != nil || got != key {
		t.Fatalf("stored key opens as %q, %v", got, err)
	}

	// A change without a key keeps the stored key and created_at.
	delete(b, "api_key")
	b["max_instances"] = 8
	if status, _, data = s.do("PUT", "/api/v1/pools/rent", body(t, b)); status != http.StatusOK {
		t.Fatalf("PUT without key: %d %s", status, data)
	}
	again := s.storedPools()[0]
	if got, err := s.sec.Secrets.OpenPoolKey("rent", again.SealedAPIKey); err != nil || got != key || again.MaxInstances != 8 ||
		!again.CreatedAt.Equal(stored[0].CreatedAt) {
		t.Errorf("after a change without key: %+v, key %q, %v", again, got, err)
	}
	// A new key replaces it.
	b["api_key"] = "vast-secret-key-2"
	if status, _, data = s.do("PUT", "/api/v1/pools/rent", body(t, b)); status != http.StatusOK {
		t.Fatalf("PUT with a new key: %d %s", status, data)
	}
	if got, err := s.sec.Secrets.OpenPoolKey("rent", s.storedPools()[0].SealedAPIKey); err != nil || got != "vast-secret-key-2" {
		t.Errorf("new key opens as %q, %v", got, err)
	}

	// Reads never answer the key.
	for _, path := range []string{"/api/v1/pools", "/api/v1/pools/rent"} {
		status, _, data := s.do("GET", path, "")
		if status != http.StatusOK || bytes.Contains(data, []byte("vast-secret-key")) || !bytes.Contains(data, []byte(`"api_key_set":true`)) {
			t.Errorf("GET %s: %d %s", path, status, data)
		}
	}
	if status, _, data := s.do("GET", "/api/v1/pools/none", ""); status != http.StatusNotFound {
		t.Errorf("GET unknown pool: %d %s", status, data)
	}

	// Live instances: counted, and they hold off a delete.
	now := time.Now().UTC()
	for _, in := range []*berth.Instance{
		{ID: "i-ready", Pool: "rent", Phase: berth.InstanceReady, PricePerH: 0.4, CreatedAt: now},
		{ID: "i-start", Pool: "rent", Phase: berth.InstanceSSH, PricePerH: 0.15, CreatedAt: now},
		{ID: "i-gone", Pool: "rent", Phase: berth.InstanceDestroyed, PricePerH: 9, CreatedAt: now, EndedAt: now},
		{ID: "i-other", Pool: "other", Phase: berth.InstanceReady, PricePerH: 9, CreatedAt: now},
	} {
		if err := s.st.PutInstance(context.Background(), in); err != nil {
			t.Fatal(err)
		}
	}
	var list berth.PoolList
	if status, _, data = s.do("GET", "/api/v1/pools", ""); status != http.StatusOK || json.Unmarshal(data, &list) != nil || len(list.Pools) != 1 {
		t.Fatalf("GET pools: %d %s", status, data)
	}
	if p := list.Pools[0]; p.Ready != 1 || p.Starting != 1 || p.SpendPerH < 0.549 || p.SpendPerH > 0.551 {
		t.Errorf("pool counts: ready %d starting %d spend %v; want 1, 1, 0.55", p.Ready, p.Starting, p.SpendPerH)
	}
	if status, _, data = s.do("DELETE", "/api/v1/pools/rent", ""); status != http.StatusConflict {
		t.Errorf("DELETE with live instances: %d %s, want 409", status, data)
	}
	if len(s.storedPools()) != 1 {
		t.Fatal("a refused delete deleted")
	}
	if status, _, data = s.do("DELETE", "/api/v1/pools/rent?force=yes", ""); status != http.StatusBadRequest || errorField(t, data) != "force" {
		t.Errorf("DELETE ?force=yes: %d %s", status, data)
	}
	if status, _, data = s.do("DELETE", "/api/v1/pools/rent?force=true", ""); status != http.StatusNoContent {
		t.Errorf("DELETE ?force=true: %d %s", status, data)
	}
	if status, _, data = s.do("DELETE", "/api/v1/pools/rent", ""); status != http.StatusNotFound {
		t.Errorf("DELETE again: %d %s", status, data)
	}
	if in, err := s.st.Instance(context.Background(), "i-ready"); err != nil || in.Pool != "rent" {
		t.Errorf("instance record after the pool's delete: %+v, %v", in, err)
	}

	// The audit log records each change, who made it and the settings,
	// never the key.
	log := s.auditLog()
	if n := bytes.Count(log, []byte(`"pool.set"`)); n != 3 {
		t.Errorf("audit log has %d pool.set, want 3:\n%s", n, log)
	}
	if !bytes.Contains(log, []byte(`"pool.deleted"`)) || !bytes.Contains(log, []byte(`"gpu_type":"RTX 4090"`)) || !bytes.Contains(log, []byte("pool/rent")) {
		t.Errorf("audit log lacks the changes:\n%s", log)
	}
	if bytes.Contains(log, []byte("vast-secret-key")) {
		t.Errorf("audit log holds the key:\n%s", log)
	}
}

// Users, viewers, peers and agents may not read or change pools,
// instances or hosts; operators may.
func TestPoolRoles(t *testing.T) {
	t.Parallel()
	s := startPoolServer(t)
	pool := body(t, goodPool("k"))
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/api/v1/pools", ""},
		{"GET", "/api/v1/pools/rent", ""},
		{"PUT", "/api/v1/pools/rent", pool},
		{"DELETE", "/api/v1/pools/rent", ""},
		{"POST", "/api/v1/pools/rent/provision", ""},
		{"GET", "/api/v1/instances", ""},
		{"GET", "/api/v1/instances/x", ""},
		{"GET", "/api/v1/hosts", ""},
		{"POST", "/api/v1/hosts/1001/block", ""},
		{"POST", "/api/v1/hosts/1001/unblock", ""},
		{"DELETE", "/api/v1/hosts", ""},
	} {
		for _, role := range []auth.Role{auth.RoleUser, auth.RoleViewer, auth.RolePeer, auth.RoleAgent} {
			if status, _, data := s.doAuth(tc.method, tc.path, tc.body, s.tokens[role]); status != http.StatusForbidden {
				t.Errorf("%s %s as %s: %d %s, want 403", tc.method, tc.path, role, status, data)
			}
		}
	}
	if pools := s.storedPools(); len(pools) != 0 {
		t.Errorf("stored by a refused role: %+v", pools)
	}
	op := s.tokens[auth.RoleOperator]
	if status, _, data := s.doAuth("PUT", "/api/v1/pools/rent", pool, op); status != http.StatusOK {
		t.Errorf("PUT as operator: %d %s", status, data)
	}
	if status, _, data := s.doAuth("GET", "/api/v1/pools", "", op); status != http.StatusOK || !bytes.Contains(data, []byte(`"rent"`)) {
		t.Errorf("GET as operator: %d %s", status, data)
	}
}

func TestInstancesAndHosts(t *testing.T) {
	t.Parallel()
	s := startPoolServer(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	exit := 255
	for _, in := range []*berth.Instance{
		{ID: "i-1", Pool: "a", Phase: berth.InstanceFailed, Failure: berth.FailureInfraFatal, CreatedAt: now,
			Probes: []berth.Probe{{Phase: berth.InstanceSSH, Command: "ssh echo ok", ExitCode: &exit, Output: "Permission denied (publickey)", Class: berth.FailureInfraFatal, At: now}}},
		{ID: "i-2", Pool: "b", Phase: berth.InstanceReady, CreatedAt: now.Add(time.Second)},
		{ID: "i-3", Pool: "a", Phase: berth.InstanceDestroyed, CreatedAt: now.Add(2 * time.Second)},
	} {
		if err := s.st.PutInstance(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(path string) string {
		t.Helper()
		var list berth.InstanceList
		status, _, data := s.do("GET", path, "")
		if status != http.StatusOK || json.Unmarshal(data, &list) != nil {
			t.Fatalf("GET %s: %d %s", path, status, data)
		}
		var out []string
		for _, in := range list.Instances {
			out = append(out, in.ID)
		}
		return strings.Join(out, ",")
	}
	for path, want := range map[string]string{
		"/api/v1/instances":                  "i-1,i-2,i-3",
		"/api/v1/instances?pool=a":           "i-1,i-3",
		"/api/v1/instances?pool=a&live=true": "i-1",
		"/api/v1/instances?pool=none":        "",
	} {
		if got := ids(path); got != want {
			t.Errorf("GET %s = %s, want %s", path, got, want)
		}
	}
	var one berth.Instance
	status, _, data := s.do("GET", "/api/v1/instances/i-1", "")
	if status != http.StatusOK || json.Unmarshal(data, &one) != nil || len(one.Probes) != 1 || *one.Probes[0].ExitCode != 255 {
		t.Errorf("GET instance: %d %s", status, data)
	}
	if status, _, data := s.do("GET", "/api/v1/instances/none", ""); status != http.StatusNotFound {
		t.Errorf("GET unknown instance: %d %s", status, data)
	}

	// Hosts: block a machine never seen, a quarantined one; unblock lifts
	// both; clear forgets them.
	if err := s.st.PutHost(ctx, &berth.HostRecord{Provider: "vast", MachineID: 1002, Successes: 3, LastSeen: now,
		Failures: map[string]int{berth.FailureInfraFatal: 1}, QuarantinedUntil: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, path string
		status       int
		field        string
	}{
		{"POST", "/api/v1/hosts/abc/block", 400, "machine"},
		{"POST", "/api/v1/hosts/0/block", 400, "machine"},
		{"POST", "/api/v1/hosts/1001/block?provider=aws", 400, "provider"},
		{"GET", "/api/v1/hosts?provider=aws", 400, "provider"},
		{"DELETE", "/api/v1/hosts?provider=aws", 400, "provider"},
		{"POST", "/api/v1/hosts/1001/block", 200, ""},
		{"POST", "/api/v1/hosts/1002/block?provider=vast", 200, ""},
	} {
		status, _, data := s.do(tc.method, tc.path, "")
		if status != tc.status || (tc.field != "" && errorField(t, data) != tc.field) {
			t.Errorf("%s %s: %d %s; want %d %s", tc.method, tc.path, status, data, tc.status, tc.field)
		}
	}
	var hosts berth.HostList
	if status, _, data := s.do("GET", "/api/v1/hosts?provider=vast", ""); status != 200 || json.Unmarshal(data, &hosts) != nil || len(hosts.Hosts) != 2 {
		t.Fatalf("GET hosts: %d %s", status, data)
	}
	if h := hosts.Hosts[1]; h.MachineID != 1002 || !h.Blocked || h.Successes != 3 || h.QuarantinedUntil.IsZero() {
		t.Errorf("blocked host 1002 = %+v; want blocked, history and quarantine kept", h)
	}
	var h berth.HostRecord
	if status, _, data := s.do("POST", "/api/v1/hosts/1002/unblock", ""); status != 200 || json.Unmarshal(data, &h) != nil {
		t.Fatalf("unblock: %d %s", status, data)
	}
	stored, err := s.st.Hosts(ctx, "vast")
	if err != nil || len(stored) != 2 || stored[1].Blocked || !stored[1].QuarantinedUntil.IsZero() || stored[1].Successes != 3 || !stored[0].Blocked {
		t.Errorf("after unblock: %+v, %v", stored, err)
	}
	var cleared berth.HostsCleared
	if status, _, data := s.do("DELETE", "/api/v1/hosts?provider=vast", ""); status != 200 || json.Unmarshal(data, &cleared) != nil || cleared.Deleted != 2 {
		t.Errorf("clear: %d %s", status, data)
	}
	if stored, err := s.st.Hosts(ctx, "vast"); err != nil || len(stored) != 0 {
		t.Errorf("after clear: %+v, %v", stored, err)
	}
	log := s.auditLog()
	for _, action := range []string{`"host.blocked"`, `"host.unblocked"`, `"hosts.cleared"`, "host/vast/1002"} {
		if !bytes.Contains(log, []byte(action)) {
			t.Errorf("audit log lacks %s:\n%s", action, log)
		}
	}
}

// releaseFunc is a Releaser that gives inst back by calling f.
type releaseFunc func(ctx context.Context, inst *berth.Instance, reason string) error

func (f releaseFunc) Destroy(ctx context.Context, inst *berth.Instance, reason string) error {
	return f(ctx, inst, reason)
}

// DELETE /api/v1/instances/{id} gives a ready instance back through the
// Releaser, audited; it leaves one part way to ready to its provisioning
// and answers one destroyed already as it is.
func TestDeleteInstance(t *testing.T) {
	t.Parallel()
	s := startPoolServer(t)
	ctx := context.Background()
	now := time.Now().UTC()
	for _, in := range []*berth.Instance{
		{ID: "i-node", Pool: "llm", ProviderID: 77, Phase: berth.InstanceReady, Endpoint: "127.0.0.1:8000", CreatedAt: now},
		{ID: "i-boot", Pool: "llm", ProviderID: 78, Phase: berth.InstanceSSH, CreatedAt: now},
		{ID: "i-gone", Pool: "llm", ProviderID: 79, Phase: berth.InstanceDestroyed, CreatedAt: now, EndedAt: now},
	} {
		if err := s.st.PutInstance(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	if status, _, data := s.do("DELETE", "/api/v1/instances/i-node", ""); status != http.StatusServiceUnavailable {
		t.Errorf("DELETE without a releaser: %d %s, want 503", status, data)
	}
	var released []string
	s.pools.Releaser = releaseFunc(func(ctx context.Context, inst *berth.Instance, reason string) error {
		released = append(released, inst.ID+": "+reason)
		inst.Phase, inst.EndedAt = berth.InstanceDestroyed, now
		return s.st.PutInstance(ctx, inst)
	})
	for _, tc := range []struct {
		id     string
		status int
	}{{"nope", http.StatusNotFound}, {"i-boot", http.StatusConflict}, {"i-gone", http.StatusOK}} {
		if status, _, data := s.do("DELETE", "/api/v1/instances/"+tc.id, ""); status != tc.status {
			t.Errorf("DELETE %s: %d %s, want %d", tc.id, status, data, tc.status)
		}
	}
	status, _, data := s.do("DELETE", "/api/v1/instances/i-node", "")
	var in berth.Instance
	if status != http.StatusOK || json.Unmarshal(data, &in) != nil || in.Phase != berth.InstanceDestroyed {
		t.Fatalf("DELETE a ready instance: %d %s, want 200 and it destroyed", status, data)
	}
	if len(released) != 1 || released[0] != "i-node: given back by hand" {
		t.Errorf("released %q, want i-node alone, given back by hand", released)
	}
	if log := s.auditLog(); bytes.Count(log, []byte(`"instance.destroyed"`)) != 1 || !bytes.Contains(log, []byte("instance/i-node")) {
		t.Errorf("audit log: want one instance.destroyed of i-node:\n%s", log)
	}
}

func TestProvisionEndpoint(t *testing.T) {
	t.Parallel()
	s := startPoolServer(t)
	if status, _, data := s.do("PUT", "/api/v1/pools/rent", body(t, goodPool("k"))); status != http.StatusOK {
		t.Fatalf("PUT: %d %s", status, data)
	}
	if status, _, data := s.do("POST", "/api/v1/pools/rent/provision", ""); status != http.StatusServiceUnavailable ||
		!bytes.Contains(data, []byte("no provisioner")) {
		t.Errorf("provision without a provisioner: %d %s, want 503", status, data)
	}
	var got *berth.Pool
	s.pools.Provisioner = provisionFunc(func(ctx context.Context, pool *berth.Pool) (*berth.Instance, error) {
		got = pool
		switch pool.MaxInstances {
		case 1:
			return nil, berth.Errorf(berth.ECodeConflict, "pool %s is at its cap", pool.Name)
		case 2:
			return nil, errors.New("instance i-8: infra_fatal: unresolvable CDI device")
		}
		return &berth.Instance{ID: "i-9", Pool: pool.Name, Phase: berth.InstanceFailed, Failure: berth.FailureInfraFatal},
			errors.New("Permission denied (publickey)")
	})
	if status, _, data := s.do("POST", "/api/v1/pools/none/provision", ""); status != http.StatusNotFound {
		t.Errorf("provision of an unknown pool: %d %s", status, data)
	}
	status, _, data := s.do("POST", "/api/v1/pools/rent/provision", "")
	var in berth.Instance
	if status != http.StatusOK || json.Unmarshal(data, &in) != nil || in.Failure != berth.FailureInfraFatal || in.LastError != "Permission denied (publickey)" {
		t.Errorf("provision: %d %s", status, data)
	}
	if got == nil || got.Name != "rent" || len(got.SealedAPIKey) == 0 {
		t.Errorf("the provisioner got %+v; want the stored pool with its sealed key", got)
	}
	b := goodPool("")
	delete(b, "api_key")
	b["max_instances"] = 1
	if status, _, data := s.do("PUT", "/api/v1/pools/rent", body(t, b)); status != http.StatusOK {
		t.Fatalf("PUT: %d %s", status, data)
	}
	if status, _, data := s.do("POST", "/api/v1/pools/rent/provision", ""); status != http.StatusConflict {
		t.Errorf("provision that made no instance: %d %s, want the provisioner's error", status, data)
	}
	b["max_instances"] = 2
	if status, _, data := s.do("PUT", "/api/v1/pools/rent", body(t, b)); status != http.StatusOK {
		t.Fatalf("PUT: %d %s", status, data)
	}
	if status, _, data := s.do("POST", "/api/v1/pools/rent/provision", ""); status != http.StatusServiceUnavailable ||
		!bytes.Contains(data, []byte("no instance became ready: instance i-8: infra_fatal: unresolvable CDI device")) {
		t.Errorf("provision whose every offer failed: %d %s, want 503 saying why", status, data)
	}
	if !bytes.Contains(s.auditLog(), []byte(`"pool.provision"`)) {
		t.Error("provision not audited")
	}
}

func TestPoolEndpointsDisabled(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	for _, path := range []string{"/api/v1/pools", "/api/v1/instances", "/api/v1/hosts"} {
		if status, _, data := s.do("GET", path, ""); status != http.StatusNotFound || !bytes.Contains(data, []byte("not enabled")) {
			t.Errorf("GET %s without pools: %d %s", path, status, data)
		}
	}
}
