package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/internal/kubetest"
)

// TestBackendAddListRemove: an admin adds a real API server as a
// Kubernetes backend with berth backend add; berth backends lists it
// beside the agent pool; its kubeconfig's token is in no output, in no
// log and not in plain text in the store's files; a restarted server runs
// it again; berth backend rm removes it. A kubeconfig the server cannot
// use is refused, naming --kubeconfig, and nothing is kept.
func TestBackendAddListRemove(t *testing.T) {
	t.Parallel()
	ks := kubetest.Start(t)
	cl := newCluster(t)
	cl.addAgent("gpu-1")

	bad := filepath.Join(t.TempDir(), "bad-kubeconfig")
	if err := os.WriteFile(bad, []byte("apiVersion: v1\nkind: Config\nclusters: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, err := runCLI(t, "", "", "--server", cl.url, "backend", "add", "k8s", "--kubeconfig", bad)
	if exitCode(err) != 2 || !strings.HasPrefix(errOut, "berth: --kubeconfig:") {
		t.Fatalf("backend add with a broken kubeconfig: exit %d, %q; want 2 naming --kubeconfig", exitCode(err), errOut)
	}

	cl.addKubeBackend(ks, "k8s", "--queues", "gpu", "--namespace", "ml", "--node-selector", "pool=h100")
	out := mustCLI(t, "", "", "--server", cl.url, "backends")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "NAME KIND STATE NODES GPUS PODS LAST-SYNC" ||
		!strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), "agents agents ready 1 2/2 0 ") ||
		!strings.HasPrefix(strings.Join(strings.Fields(lines[2]), " "), "k8s kubernetes ready ") {
		t.Fatalf("berth backends:\n%s", out)
	}
	var list []berth.BackendInfo
	if err := json.Unmarshal([]byte(mustCLI(t, "", "", "--server", cl.url, "backends", "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[1].Spec == nil || list[1].Spec.Kubernetes.Namespace != "ml" ||
		list[1].Spec.Kubernetes.NodeSelector["pool"] != "h100" || list[1].Spec.Queues[0] != "gpu" {
		t.Fatalf("berth backends -o json: %+v", list)
	}

	// The token is nowhere but sealed: not in any output, not in the
	// server's log, not in the store's files in plain text.
	checkTokenHidden := func(when string) {
		t.Helper()
		for _, args := range [][]string{{"backends", "-o", "json"}, {"backends", "-o", "yaml"}, {"backends", "-o", "wide"}} {
			if out := mustCLI(t, "", "", append([]string{"--server", cl.url}, args...)...); strings.Contains(out, ks.Token) {
				t.Errorf("%s: berth %s shows the kubeconfig's token", when, strings.Join(args, " "))
			}
		}
		if strings.Contains(cl.server.out.String(), ks.Token) {
			t.Errorf("%s: the server's output holds the kubeconfig's token", when)
		}
		files, _ := filepath.Glob(filepath.Join(cl.dir, "server", "*"))
		for _, f := range files {
			if data, err := os.ReadFile(f); err == nil && bytes.Contains(data, []byte(ks.Token)) {
				t.Errorf("%s: %s holds the kubeconfig's token in plain text", when, f)
			}
		}
	}
	checkTokenHidden("after add")

	// A restarted server runs the stored backend again.
	cl.server.stop()
	cl.startServer()
	cl.awaitBackend("k8s", 30*time.Second, berth.BackendReady)
	checkTokenHidden("after a restart")

	if out := mustCLI(t, "", "", "--server", cl.url, "backend", "rm", "k8s"); out != "backend k8s removed\n" {
		t.Fatalf("backend rm: %q", out)
	}
	if err := json.Unmarshal([]byte(mustCLI(t, "", "", "--server", cl.url, "backends", "-o", "json")), &list); err != nil || len(list) != 1 {
		t.Fatalf("backends after rm: %+v, %v", list, err)
	}
}
