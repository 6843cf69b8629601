package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/api/apitest"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/controller"
	"github.com/berth-dev/berth/store"
)

// kubeconfigSecret is in every kubeconfig the tests add: it must never be
// answered, stored in plain text or audited.
const kubeconfigSecret = "tok-3c1f9b2e7d"

func kubeconfig(server string) string {
	return "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: " + server +
		"}}]\nusers: [{name: u, user: {token: " + kubeconfigSecret + "}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
}

// fakeKube is a backend of kind kubernetes the tests' factory builds: it
// reports pods as the test sets them and records its spec and its close.
type fakeKube struct {
	spec     berth.BackendSpec
	host     controller.BackendHost
	launched chan string // attempt ids
	mu       sync.Mutex
	pods     int
	closed   bool
}

func (f *fakeKube) Launch(_ *berth.Job, a *berth.Attempt, _ map[string]string) { f.launched <- a.ID }
func (f *fakeKube) Stop(*berth.Attempt, string, string)                        {}
func (f *fakeKube) Status() berth.BackendStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return berth.BackendStatus{Name: f.spec.Name, Kind: f.spec.Kind, State: berth.BackendReady, Nodes: 2, GPUsFree: 5,
		GPUsTotal: 8, Pods: f.pods}
}
func (f *fakeKube) isClosed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

func (f *fakeKube) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
}

// kubeKinds is a BackendKinds whose kubernetes factory refuses a
// kubeconfig naming no server and records each backend it builds.
type kubeKinds struct {
	mu    sync.Mutex
	built map[string]*fakeKube
}

func (k *kubeKinds) factory(spec berth.BackendSpec, host controller.BackendHost) (controller.Backend, error) {
	if !strings.Contains(spec.Kubernetes.Kubeconfig, "server: https://") {
		return nil, berth.Invalidf("kubernetes.kubeconfig", "names no cluster server")
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	f := &fakeKube{spec: spec, host: host, launched: make(chan string, 8)}
	k.built[spec.Name] = f
	return f, nil
}

func (k *kubeKinds) get(name string) *fakeKube {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.built[name]
}

// backendServer is a server with backends on its real SQLite store, an
// audit log, and tokens of each role.
type backendServer struct {
	*server
	kinds     *kubeKinds
	backends  *api.Backends
	auditPath string
	tokens    map[auth.Role]string
}

func startBackendServer(t *testing.T) *backendServer {
	t.Helper()
	return restartBackendServer(t, nil)
}

// restartBackendServer starts a server; with prev (its controller
// stopped), on prev's store and keys, as a server restarted would be.
func restartBackendServer(t *testing.T, prev *backendServer) *backendServer {
	t.Helper()
	kinds := &kubeKinds{built: map[string]*fakeKube{}}
	withKinds := func(cfg *controller.Config) {
		cfg.BackendKinds = map[string]controller.BackendFactory{berth.BackendKindKubernetes: kinds.factory}
	}
	var (
		st        store.Store
		ctl       *controller.Controller
		sec       *api.Security
		auditPath string
	)
	if prev == nil {
		auditPath = filepath.Join(t.TempDir(), "audit.log")
		st, ctl, sec = startController(t, t.TempDir(), func(st store.Store) *api.Security {
			return apitest.SecurityWithAudit(t, st, "", auditPath)
		}, withKinds)
	} else {
		st, sec, auditPath = prev.st, prev.sec, prev.auditPath
		ctl, _ = startControllerOn(t, st, func(store.Store) *api.Security { return sec }, withKinds)
	}
	h := api.New(ctl, st, sec, nil)
	h.Backends = &api.Backends{Store: st, Keys: sec.Secrets, Registry: ctl}
	if err := h.Backends.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	s, tokens := serveWithRoles(t, h, st, ctl, sec)
	return &backendServer{server: s, kinds: kinds, backends: h.Backends, auditPath: auditPath, tokens: tokens}
}

// goodBackend is a valid backend body named name.
func goodBackend(name string) map[string]any {
	return map[string]any{"name": name, "kind": "kubernetes", "queues": []string{"gpu"},
		"kubernetes": map[string]any{"kubeconfig": kubeconfig("https://127.0.0.1:6443"), "context": "x",
			"image_default": "nvcr.io/nvidia/pytorch:25.01-py3", "node_selector": map[string]string{"pool": "h100"}}}
}

func (s *backendServer) stored() []*berth.BackendSpec {
	s.t.Helper()
	bs, err := s.st.Backends(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	return bs
}

func (s *backendServer) list() []berth.BackendInfo {
	s.t.Helper()
	code, _, data := s.do("GET", "/api/v1/backends", "")
	if code != http.StatusOK {
		s.t.Fatalf("GET /api/v1/backends: %d %s", code, data)
	}
	if bytes.Contains(data, []byte(kubeconfigSecret)) || bytes.Contains(data, []byte("kubeconfig")) {
		s.t.Fatalf("the list answers a kubeconfig: %s", data)
	}
	var l berth.BackendList
	if err := json.Unmarshal(data, &l); err != nil {
		s.t.Fatal(err)
	}
	return l.Backends
}

// Only admins add and remove backends; those who may list workers list
// them.
func TestBackendRoles(t *testing.T) {
	t.Parallel()
	s := startBackendServer(t)
	for _, role := range []auth.Role{auth.RoleOperator, auth.RoleUser, auth.RoleViewer, auth.RolePeer, auth.RoleAgent} {
		if code, _, data := s.doAuth("POST", "/api/v1/backends", body(t, goodBackend("k8s")), s.tokens[role]); code != http.StatusForbidden {
			t.Errorf("%s adds a backend: %d %s, want 403", role, code, data)
		}
		if code, _, data := s.doAuth("DELETE", "/api/v1/backends/k8s", "", s.tokens[role]); code != http.StatusForbidden {
			t.Errorf("%s removes a backend: %d %s, want 403", role, code, data)
		}
	}
	if n := len(s.stored()); n != 0 || s.kinds.get("k8s") != nil {
		t.Fatalf("refused adds stored %d backends or built one", n)
	}
	for _, role := range []auth.Role{auth.RoleViewer, auth.RoleUser, auth.RoleOperator} {
		if code, _, data := s.doAuth("GET", "/api/v1/backends", "", s.tokens[role]); code != http.StatusOK {
			t.Errorf("%s lists backends: %d %s, want 200", role, code, data)
		}
	}
	if code, _, _ := s.doAuth("GET", "/api/v1/backends", "", s.tokens[auth.RoleAgent]); code != http.StatusForbidden {
		t.Errorf("an agent lists backends: %d, want 403", code)
	}
}

// Each bad field, and a kubeconfig the kind's factory refuses, is a 400
// naming the field; nothing is stored, built or audited.
func TestBackendValidation(t *testing.T) {
	t.Parallel()
	s := startBackendServer(t)
	kube := func(b map[string]any) map[string]any { return b["kubernetes"].(map[string]any) }
	for _, tc := range []struct {
		field string
		edit  func(map[string]any)
	}{
		{"name", func(b map[string]any) { delete(b, "name") }},
		{"name", func(b map[string]any) { b["name"] = "K8s" }},
		{"name", func(b map[string]any) { b["name"] = "agents" }},
		{"kind", func(b map[string]any) { b["kind"] = "slurm" }},
		{"kind", func(b map[string]any) { delete(b, "kind") }},
		{"kubernetes", func(b map[string]any) { delete(b, "kubernetes") }},
		{"kubernetes.kubeconfig", func(b map[string]any) { delete(kube(b), "kubeconfig") }},
		{"kubernetes.kubeconfig", func(b map[string]any) { kube(b)["kubeconfig"] = kubeconfig("http://127.0.0.1:6443") }},
		{"kubernetes.namespace", func(b map[string]any) { kube(b)["namespace"] = "Not_A_Label" }},
		{"kubernetes.placement", func(b map[string]any) { kube(b)["placement"] = "anywhere" }},
		{"kubernetes.image_default", func(b map[string]any) { kube(b)["image_default"] = "two words" }},
		{"kubernetes.node_selector", func(b map[string]any) { kube(b)["node_selector"] = map[string]string{"a b": "c"} }},
		{"kubernetes.node_selector", func(b map[string]any) { kube(b)["node_selector"] = "pool=h100" }},
		{"kubernetes.nodes", func(b map[string]any) { kube(b)["nodes"] = 3 }},
		{"queues", func(b map[string]any) { b["queues"] = []string{"Bad Queue"} }},
		{"sealed_credentials", func(b map[string]any) { b["sealed_credentials"] = "AAAA" }},
	} {
		b := goodBackend("k8s")
		tc.edit(b)
		code, _, data := s.do("POST", "/api/v1/backends", body(t, b))
		if code != http.StatusBadRequest || errorField(t, data) != tc.field {
			t.Errorf("%s: %d %s, want 400 naming %s", tc.field, code, data, tc.field)
		}
		if bytes.Contains(data, []byte(kubeconfigSecret)) {
			t.Errorf("%s: the error answers the kubeconfig: %s", tc.field, data)
		}
	}
	if n := len(s.stored()); n != 0 {
		t.Fatalf("bad input stored %d backends", n)
	}
	if l := s.list(); len(l) != 1 || l[0].Status.Name != berth.BackendAgents {
		t.Fatalf("backends after bad input: %+v, want the agent pool alone", l)
	}
	// Only the add the kind refused (after it was stored) is audited, as
	// added and then refused.
	log := readAudit(t, s.auditPath)
	if bytes.Contains(log, []byte(kubeconfigSecret)) || bytes.Count(log, []byte("backend.added")) != 1 ||
		bytes.Count(log, []byte("backend.refused")) != 1 || !bytes.Contains(log, []byte("names no cluster server")) {
		t.Errorf("audit log after bad input:\n%s", log)
	}
}

// An added backend is stored with its kubeconfig sealed, built with it in
// plain text and its defaults, listed with its status, audited without
// its credentials, and never answered with them; a second add of its name
// is 409; removing it refuses while attempts run there unless forced.
func TestBackendAddListRemove(t *testing.T) {
	t.Parallel()
	s := startBackendServer(t)
	code, _, data := s.do("POST", "/api/v1/backends", body(t, goodBackend("k8s-cw")))
	if code != http.StatusCreated {
		t.Fatalf("add: %d %s", code, data)
	}
	if bytes.Contains(data, []byte(kubeconfigSecret)) || bytes.Contains(data, []byte("kubeconfig")) || bytes.Contains(data, []byte("sealed")) {
		t.Fatalf("add answers credentials: %s", data)
	}
	var added berth.BackendInfo
	if err := json.Unmarshal(data, &added); err != nil {
		t.Fatal(err)
	}
	if added.Spec == nil || added.Spec.Kubernetes.Namespace != berth.DefaultKubeNamespace || added.Status.State != berth.BackendReady ||
		added.Status.GPUsTotal != 8 || added.Spec.CreatedAt.IsZero() {
		t.Fatalf("add answered %+v (spec %+v)", added, added.Spec)
	}
	built := s.kinds.get("k8s-cw")
	if built == nil || built.spec.Kubernetes.Kubeconfig != kubeconfig("https://127.0.0.1:6443") ||
		built.spec.Kubernetes.Placement != berth.PlacementBerth || built.spec.Kubernetes.Namespace != berth.DefaultKubeNamespace {
		t.Fatalf("the factory was given %+v", built)
	}
	stored := s.stored()
	if len(stored) != 1 || stored[0].Kubernetes.Kubeconfig != "" || len(stored[0].SealedCredentials) == 0 ||
		bytes.Contains(stored[0].SealedCredentials, []byte(kubeconfigSecret)) {
		t.Fatalf("stored %+v", stored)
	}
	if plain, err := s.sec.Secrets.OpenBackendCredentials("k8s-cw", stored[0].SealedCredentials); err != nil || plain != built.spec.Kubernetes.Kubeconfig {
		t.Fatalf("the sealed kubeconfig opens to %q, %v", plain, err)
	}
	l := s.list()
	if len(l) != 2 || l[0].Status.Name != berth.BackendAgents || l[0].Spec != nil || l[1].Status.Name != "k8s-cw" ||
		l[1].Spec.Kubernetes.Context != "x" || l[1].Status.Nodes != 2 {
		t.Fatalf("list = %+v", l)
	}
	code, _, data = s.do("GET", "/api/v1/backends/k8s-cw", "")
	if code != http.StatusOK || bytes.Contains(data, []byte(kubeconfigSecret)) || !bytes.Contains(data, []byte(`"gpus_free":5`)) {
		t.Fatalf("GET one: %d %s", code, data)
	}
	if code, _, _ := s.do("GET", "/api/v1/backends/nope", ""); code != http.StatusNotFound {
		t.Errorf("GET an unknown backend: %d, want 404", code)
	}
	if code, _, data := s.do("POST", "/api/v1/backends", body(t, goodBackend("k8s-cw"))); code != http.StatusConflict {
		t.Errorf("a second add of a name: %d %s, want 409", code, data)
	}
	if n := len(s.stored()); n != 1 {
		t.Fatalf("%d stored after a refused second add", n)
	}

	// Removing: the agent pool never; an unknown name 404; a backend
	// running attempts only by force.
	if code, _, data := s.do("DELETE", "/api/v1/backends/agents", ""); code != http.StatusBadRequest || errorField(t, data) != "name" {
		t.Errorf("remove the agent pool: %d %s, want 400 on name", code, data)
	}
	if code, _, _ := s.do("DELETE", "/api/v1/backends/nope", ""); code != http.StatusNotFound {
		t.Errorf("remove an unknown backend: %d, want 404", code)
	}
	built.mu.Lock()
	built.pods = 3
	built.mu.Unlock()
	code, _, data = s.do("DELETE", "/api/v1/backends/k8s-cw", "")
	if code != http.StatusConflict || !strings.Contains(string(data), "force") {
		t.Fatalf("remove a backend running attempts: %d %s, want 409 saying force", code, data)
	}
	if n := len(s.stored()); n != 1 || built.isClosed() {
		t.Fatalf("a refused remove changed something: %d stored, closed %v", n, built.isClosed())
	}
	if code, _, data := s.do("DELETE", "/api/v1/backends/k8s-cw?force=true", ""); code != http.StatusNoContent {
		t.Fatalf("forced remove: %d %s", code, data)
	}
	if n := len(s.stored()); n != 0 || !built.isClosed() {
		t.Fatalf("after a remove: %d stored, closed %v", n, built.isClosed())
	}
	if l := s.list(); len(l) != 1 {
		t.Fatalf("list after a remove: %+v", l)
	}
	log := readAudit(t, s.auditPath)
	if bytes.Contains(log, []byte(kubeconfigSecret)) || !bytes.Contains(log, []byte("backend.added")) || !bytes.Contains(log, []byte("backend.removed")) {
		t.Errorf("audit log:\n%s", log)
	}
	// The name is free again.
	if code, _, data := s.do("POST", "/api/v1/backends", body(t, goodBackend("k8s-cw"))); code != http.StatusCreated {
		t.Errorf("add after a remove: %d %s", code, data)
	}
}

// A restarted server runs the backends its store holds; one it cannot
// start (a kind it does not know) is listed failed, saying why, and may
// be removed.
func TestBackendsLoadedAtStart(t *testing.T) {
	t.Parallel()
	first := startBackendServer(t)
	if code, _, data := first.do("POST", "/api/v1/backends", body(t, goodBackend("k8s-a"))); code != http.StatusCreated {
		t.Fatalf("add: %d %s", code, data)
	}
	// A backend of a kind this server build does not have, as a newer
	// server might have stored it.
	if err := first.st.AddBackend(t.Context(), &berth.BackendSpec{Name: "other", Kind: "slurm", SealedCredentials: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := first.ctl.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !first.kinds.get("k8s-a").isClosed() {
		t.Fatal("a stopped controller left its backend open")
	}
	s := restartBackendServer(t, first)
	built := s.kinds.get("k8s-a")
	if built == nil || built.spec.Kubernetes.Kubeconfig != kubeconfig("https://127.0.0.1:6443") || built.spec.Queues[0] != "gpu" {
		t.Fatalf("at start the factory was given %+v", built)
	}
	l := s.list()
	if len(l) != 3 || l[1].Status.Name != "k8s-a" || l[1].Status.State != berth.BackendReady ||
		l[2].Status.Name != "other" || l[2].Status.State != berth.BackendFailed || l[2].Status.Message == "" {
		t.Fatalf("list after a restart = %+v", l)
	}
	if code, _, data := s.do("DELETE", "/api/v1/backends/other", ""); code != http.StatusNoContent {
		t.Fatalf("remove a failed backend: %d %s", code, data)
	}
	if l := s.list(); len(l) != 2 {
		t.Fatalf("list after removing the failed backend = %+v", l)
	}
}

// Removing a backend counts the attempts the controller holds there, not
// only the pods the backend sees (none while it cannot reach its cluster).
func TestBackendRemoveCountsHeldAttempts(t *testing.T) {
	t.Parallel()
	s := startBackendServer(t)
	if code, _, data := s.do("POST", "/api/v1/backends", body(t, goodBackend("k8s-cw"))); code != http.StatusCreated {
		t.Fatalf("add: %d %s", code, data)
	}
	built := s.kinds.get("k8s-cw")
	built.host.SetWorkers([]*berth.Worker{{ID: "k8s-cw/n1", Host: "n1", GPUs: []berth.GPU{{Index: 0}}, CPUs: 8, Memory: 32 << 30, Slots: 10}})
	s.submit(`{"command": ["python", "train.py"], "backend": "k8s-cw", "resources": {"gpus": 1}}`, http.StatusCreated)
	<-built.launched
	code, _, data := s.do("DELETE", "/api/v1/backends/k8s-cw", "")
	if code != http.StatusConflict || !strings.Contains(string(data), "runs 1 attempt:") {
		t.Fatalf("remove with an attempt placed there (the backend seeing no pod): %d %s, want 409", code, data)
	}
	if code, _, data := s.do("DELETE", "/api/v1/backends/k8s-cw?force=true", ""); code != http.StatusNoContent {
		t.Fatalf("forced remove: %d %s", code, data)
	}
}
