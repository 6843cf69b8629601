package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/controller"
)

// cliKube is a kubernetes backend as the CLI tests' server builds it: it
// reports a fixed status.
type cliKube struct{ name string }

func (k cliKube) Launch(*berth.Job, *berth.Attempt, map[string]string) {}
func (k cliKube) Stop(*berth.Attempt, string, string)                  {}
func (k cliKube) Close()                                               {}
func (k cliKube) Status() berth.BackendStatus {
	return berth.BackendStatus{Name: k.name, Kind: berth.BackendKindKubernetes, State: berth.BackendReady, Nodes: 2,
		GPUsFree: 5, GPUsTotal: 8, Pods: 1}
}

// newCLIWithKube is newCLI whose server builds kubernetes backends as
// cliKube, refusing a kubeconfig that names no server.
func newCLIWithKube(t *testing.T) *cli {
	t.Helper()
	return newCLIWithKinds(t, map[string]controller.BackendFactory{berth.BackendKindKubernetes: func(spec berth.BackendSpec, _ controller.BackendHost) (controller.Backend, error) {
		if !strings.Contains(spec.Kubernetes.Kubeconfig, "server:") {
			return nil, berth.Invalidf("kubernetes.kubeconfig", "names no cluster server")
		}
		return cliKube{spec.Name}, nil
	}})
}

// newCLIWithKinds is newCLI whose server has the backend kinds kinds.
func newCLIWithKinds(t *testing.T, kinds map[string]controller.BackendFactory) *cli {
	t.Helper()
	rs, err := startServer(context.Background(), &serverConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0", BackendKinds: kinds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close(context.Background()) })
	return &cli{t: t, url: rs.URL}
}

const cliKubeconfig = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n" +
	"    certificate-authority-data: Zm9v\nusers:\n- name: u\n  user:\n    token: cli-secret-token\n" +
	"contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"

func TestBackendAddListRm(t *testing.T) {
	t.Parallel()
	c := newCLIWithKube(t)
	good := privateFile(t, cliKubeconfig)
	add := func(extra ...string) []string {
		return append([]string{"backend", "add", "k8s-cw", "--kind", "kubernetes", "--kubeconfig", good}, extra...)
	}

	// Bad input: one line naming the flag, nothing added.
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"backend", "add", "k8s-cw", "--kind", "kubernetes"}, "--kubeconfig"},
		{add("--kubeconfig", filepath.Join(t.TempDir(), "missing")), "--kubeconfig"},
		{add("--kubeconfig", privateFile(t, " \n")), "--kubeconfig"},
		{add("--kubeconfig", privateFile(t, strings.Replace(cliKubeconfig, "    token: cli-secret-token",
			"    client-certificate: /home/me/.minikube/client.crt", 1))), "--kubeconfig"},
		{add("--kubeconfig", privateFile(t, "clusters: [{name: c, cluster: {server: \"https://127.0.0.1:6443\", certificate-authority: \"/tmp/ca.crt\"}}]\n")), "--kubeconfig"},
		{add("--kubeconfig", privateFile(t, "apiVersion: v1\nkind: Config\n")), "--kubeconfig"}, // the server's kind refuses it
		{add("--kind", "slurm"), "--kind"},
		{add("--namespace", "Not_Valid"), "--namespace"},
		{add("--placement", "random"), "--placement"},
		{add("--image-default", "two words"), "--image-default"},
		{add("--node-selector", "novalue"), "--node-selector"},
		{add("--node-selector", "a b=c"), "--node-selector"},
		{add("--queues", "GPU"), "--queues"},
		{[]string{"backend", "add", "agents", "--kubeconfig", good}, "NAME"},
		{[]string{"backend", "add", "--kubeconfig", good}, "NAME"},
	} {
		code, out, errOut := c.run(tc.args...)
		if code != exitUsage || !strings.HasPrefix(errOut, "berth: "+tc.flag+":") || strings.Count(errOut, "\n") != 1 || out != "" {
			t.Errorf("berth %s: exit %d, %q, %q; want one line naming %s", strings.Join(tc.args, " "), code, out, errOut, tc.flag)
		}
		if strings.Contains(errOut, "cli-secret-token") {
			t.Errorf("berth %s printed the kubeconfig's token", strings.Join(tc.args, " "))
		}
	}
	if list := listJSON[berth.BackendInfo](c, "backends", "-o", "json"); len(list) != 1 || list[0].Status.Name != berth.BackendAgents {
		t.Fatalf("backends after bad input: %+v, want the agent pool alone", list)
	}

	code, out, errOut := c.run(add("--queues", "gpu,train", "--image-default", "nvcr.io/nvidia/pytorch:25.01-py3",
		"--node-selector", "nvidia.com/gpu.product=H100,pool=a", "--node-selector", "zone=z1", "--context", "x")...)
	if code != 0 || out != "backend k8s-cw added: kubernetes, namespace berth, placement berth; ready, 2 nodes, 5/8 GPUs free\n" {
		t.Fatalf("backend add: exit %d, %q, %q", code, out, errOut)
	}
	if code, _, errOut := c.run(add()...); code != exitUsage || !strings.Contains(errOut, "exists") {
		t.Errorf("a second add: exit %d, %q; want one saying it exists", code, errOut)
	}

	code, out, _ = c.run("backends")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "NAME KIND STATE NODES GPUS PODS LAST-SYNC" ||
		!strings.HasPrefix(strings.Join(strings.Fields(lines[2]), " "), "k8s-cw kubernetes ready 2 5/8 1 ") ||
		!strings.HasPrefix(lines[1], "agents") {
		t.Fatalf("berth backends: exit %d\n%s", code, out)
	}
	code, out, _ = c.run("backends", "-o", "wide")
	if code != 0 || !strings.Contains(out, "gpu,train") || !strings.Contains(out, "NAMESPACE") {
		t.Fatalf("berth backends -o wide: exit %d\n%s", code, out)
	}
	list := listJSON[berth.BackendInfo](c, "backends", "-o", "json")
	if len(list) != 2 || list[1].Spec == nil || list[1].Spec.Kubernetes.NodeSelector["zone"] != "z1" ||
		list[1].Spec.Kubernetes.NodeSelector["nvidia.com/gpu.product"] != "H100" || list[1].Spec.Kubernetes.Kubeconfig != "" {
		t.Fatalf("berth backends -o json: %+v", list)
	}
	for _, args := range [][]string{{"backends", "-o", "json"}, {"backends", "-o", "yaml"}, {"backends", "-o", "wide"}} {
		if _, out, _ := c.run(args...); strings.Contains(out, "cli-secret-token") || strings.Contains(out, "kubeconfig") {
			t.Errorf("berth %s shows the kubeconfig:\n%s", strings.Join(args, " "), out)
		}
	}

	// A job may name it, with an image; a bad image or an unknown backend
	// is refused naming the field.
	if code, _, errOut := c.run("submit", "--backend", "nope", "--", "true"); code != exitUsage || !strings.Contains(errOut, "backend") {
		t.Errorf("submit --backend nope: exit %d, %q", code, errOut)
	}
	if code, _, errOut := c.run("submit", "--backend", "k8s-cw", "--image", "two words", "--", "true"); code != exitUsage || !strings.Contains(errOut, "image") {
		t.Errorf("submit --image 'two words': exit %d, %q", code, errOut)
	}

	// A job file names the backend and its image; a flag overrides it.
	file := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(file, []byte("backend: k8s-cw\nimage: nvcr.io/nvidia/pytorch:25.01-py3\ncommand: [python, train.py]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"submit", "-f", file, "--hold-until-fits"}, {"submit", "-f", file, "--hold-until-fits", "--image", "ubuntu:24.04"}} {
		if code, _, errOut := c.run(args...); code != 0 {
			t.Fatalf("berth %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
	}
	jobs := c.listJobs()
	images := map[string]bool{}
	for _, j := range jobs {
		if j.Backend != "k8s-cw" {
			t.Errorf("job %s: backend %q, want k8s-cw", j.ID, j.Backend)
		}
		images[j.Image] = true
	}
	if len(jobs) != 2 || !images["nvcr.io/nvidia/pytorch:25.01-py3"] || !images["ubuntu:24.04"] {
		t.Fatalf("jobs from the file: %+v", jobs)
	}
	if code, out, _ := c.run("job", jobs[0].ID); code != 0 || !strings.Contains(out, "Backend:   k8s-cw\n") ||
		!strings.Contains(out, "Image:     "+jobs[0].Image+"\n") {
		t.Errorf("berth job: exit %d\n%s", code, out)
	}
	for _, j := range jobs {
		if code, _, errOut := c.run("cancel", j.ID); code != 0 {
			t.Fatalf("cancel %s: %s", j.ID, errOut)
		}
	}

	// rm refuses while attempts run there (the fake reports one pod).
	if code, _, errOut := c.run("backend", "rm", "k8s-cw"); code != exitUsage || !strings.Contains(errOut, "--force") && !strings.Contains(errOut, "force") {
		t.Errorf("backend rm with a pod running: exit %d, %q; want refused, saying force", code, errOut)
	}
	if code, out, errOut := c.run("backend", "rm", "--force", "k8s-cw"); code != 0 || out != "backend k8s-cw removed\n" {
		t.Fatalf("backend rm --force: exit %d, %q, %q", code, out, errOut)
	}
	if code, _, errOut := c.run("backend", "rm", "k8s-cw"); code == 0 || !strings.Contains(errOut, "no backend k8s-cw") {
		t.Errorf("a second rm: exit %d, %q", code, errOut)
	}
	if list := listJSON[berth.BackendInfo](c, "backends", "-o", "json"); len(list) != 1 {
		t.Fatalf("backends after rm: %+v", list)
	}
}

// A server without the kind says so, naming --kind, and keeps nothing.
func TestBackendAddUnknownKind(t *testing.T) {
	t.Parallel()
	c := newCLIWithKinds(t, map[string]controller.BackendFactory{})
	code, _, errOut := c.run("backend", "add", "k8s", "--kubeconfig", privateFile(t, cliKubeconfig))
	if code != exitUsage || !strings.HasPrefix(errOut, "berth: --kind:") {
		t.Fatalf("backend add on a server without the kind: exit %d, %q", code, errOut)
	}
	if list := listJSON[berth.BackendInfo](c, "backends", "-o", "json"); len(list) != 1 {
		t.Fatalf("backends after a refused add: %+v", list)
	}
}
