package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/internal/kubetest"
)

// inlineKubeconfig writes a kubeconfig for the API server ks with its
// credentials inline (the CA as certificate-authority-data, not a file),
// as berth backend add takes it, and returns its path.
func inlineKubeconfig(t *testing.T, ks *kubetest.Server) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	body := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: kubetest, cluster: {server: %q, certificate-authority-data: %q}}]
users: [{name: admin, user: {token: %q}}]
contexts: [{name: kubetest, context: {cluster: kubetest, user: admin}}]
current-context: kubetest
`, ks.URL, base64.StdEncoding.EncodeToString(ks.CA), ks.Token)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// addKubeBackend adds the API server ks as backend name with berth
// backend add (extra: more of its flags), then waits until berth backends
// shows it ready.
func (cl *cluster) addKubeBackend(ks *kubetest.Server, name string, extra ...string) {
	cl.t.Helper()
	args := append([]string{"--server", cl.url, "backend", "add", name, "--kind", "kubernetes",
		"--kubeconfig", inlineKubeconfig(cl.t, ks)}, extra...)
	mustCLI(cl.t, "", "", args...)
	cl.awaitBackend(name, 30*time.Second, berth.BackendReady)
}

// awaitBackend waits until backend name is listed in state, and returns
// it.
func (cl *cluster) awaitBackend(name string, timeout time.Duration, state string) berth.BackendInfo {
	cl.t.Helper()
	var got berth.BackendInfo
	cl.eventually(timeout, "backend "+name+" "+state, func() bool {
		list, err := cl.c.Backends(context.Background())
		if err != nil {
			cl.t.Fatalf("backends: %v", err)
		}
		for _, b := range list {
			if b.Status.Name == name {
				got = b
				return b.Status.State == state
			}
		}
		return false
	})
	return got
}
