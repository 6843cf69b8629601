package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
	"github.com/berth-dev/berth/internal/kubetest"
)

// kubeAPI speaks to a test API server's REST API as the kubelet and an
// operator would, in JSON, so that the e2e tests do not compile client-go.
type kubeAPI struct {
	t   *testing.T
	srv *kubetest.Server
	hc  *http.Client
}

func newKubeAPI(t *testing.T, srv *kubetest.Server) *kubeAPI {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(srv.CA)
	return &kubeAPI{t: t, srv: srv, hc: &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}
}

// do sends body (JSON) to path and decodes the answer into out (when not
// nil); an answer other than 2xx fails the test unless allowed.
func (k *kubeAPI) do(method, path, contentType string, body, out any, allowed ...int) int {
	k.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			k.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, k.srv.URL+path, rd)
	if err != nil {
		k.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+k.srv.Token)
	req.Header.Set("Content-Type", contentType)
	resp, err := k.hc.Do(req)
	if err != nil {
		k.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	for _, code := range allowed {
		if resp.StatusCode == code {
			return code
		}
	}
	if resp.StatusCode/100 != 2 {
		k.t.Fatalf("%s %s: %s: %s", method, path, resp.Status, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			k.t.Fatal(err)
		}
	}
	return resp.StatusCode
}

// addNode registers a Ready node with gpus nvidia.com/gpu.
func (k *kubeAPI) addNode(name string, gpus int) {
	k.t.Helper()
	k.do("POST", "/api/v1/nodes", "application/json", map[string]any{"apiVersion": "v1", "kind": "Node",
		"metadata": map[string]any{"name": name, "labels": map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}}, nil)
	capacity := map[string]string{"nvidia.com/gpu": fmt.Sprint(gpus), "cpu": "32", "memory": "256Gi", "pods": "110"}
	k.do("PATCH", "/api/v1/nodes/"+name+"/status", "application/merge-patch+json", map[string]any{"status": map[string]any{
		"capacity": capacity, "allocatable": capacity, "conditions": []map[string]string{{"type": "Ready", "status": "True"}}}}, nil)
}

// kubePod is the part of a pod the tests read.
type kubePod struct {
	Metadata struct {
		Name              string            `json:"name"`
		Labels            map[string]string `json:"labels"`
		DeletionTimestamp *time.Time        `json:"deletionTimestamp"`
	} `json:"metadata"`
	Spec struct {
		NodeName      string `json:"nodeName"`
		RestartPolicy string `json:"restartPolicy"`
		Containers    []struct {
			Image     string   `json:"image"`
			Command   []string `json:"command"`
			Resources struct {
				Limits map[string]string `json:"limits"`
			} `json:"resources"`
		} `json:"containers"`
	} `json:"spec"`
}

// pods lists the pods of namespace ns with the label selector sel.
func (k *kubeAPI) pods(ns, sel string) []kubePod {
	k.t.Helper()
	var list struct {
		Items []kubePod `json:"items"`
	}
	k.do("GET", "/api/v1/namespaces/"+ns+"/pods?labelSelector="+url.QueryEscape(sel), "application/json", nil, &list)
	return list.Items
}

// awaitPod waits for the one pod of job id in ns and returns it; a second
// pod of the job fails the test.
func (k *kubeAPI) awaitPod(ns, id string) kubePod {
	k.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pods := k.pods(ns, "berth.dev/job="+id)
		if len(pods) > 1 {
			k.t.Fatalf("%d pods of job %s", len(pods), id)
		}
		if len(pods) == 1 {
			return pods[0]
		}
		if time.Now().After(deadline) {
			k.t.Fatalf("no pod of job %s", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// setStatus plays the kubelet: the pod's phase and its container's state
// (JSON, as in a ContainerState).
func (k *kubeAPI) setStatus(ns string, p kubePod, phase string, state map[string]any) {
	k.t.Helper()
	status := map[string]any{"phase": phase}
	if state != nil {
		status["containerStatuses"] = []map[string]any{{"name": "job", "image": p.Spec.Containers[0].Image, "ready": false,
			"restartCount": 0, "state": state}}
	}
	k.do("PATCH", "/api/v1/namespaces/"+ns+"/pods/"+p.Metadata.Name+"/status", "application/merge-patch+json",
		map[string]any{"status": status}, nil)
}

var podRunning = map[string]any{"running": map[string]any{}}

func exitedWith(code int, reason string) map[string]any {
	return map[string]any{"terminated": map[string]any{"exitCode": code, "reason": reason}}
}

// TestKubeBackend runs jobs on a Kubernetes backend of a real berth
// server against a real API server, the test playing the kubelet: a job
// runs to success in a pod of the right spec; an unschedulable pod
// becomes the job's pending reason and, past --kube-pending-timeout, a
// failed attempt of class unschedulable; berth cancel deletes the pod
// with the grace period; a restarted server adopts a running pod and
// sees it through to its end, with no second pod.
func TestKubeBackend(t *testing.T) {
	t.Parallel()
	ks := kubetest.Start(t)
	api := newKubeAPI(t, ks)
	api.addNode("gpu-1", 4)
	cl := newCluster(t, "--kube-pending-timeout", "2s", "--grace", "7s")
	cl.addKubeBackend(ks, "k8s", "--namespace", "ml")
	submit := func(args ...string) string {
		t.Helper()
		out := mustCLI(t, "", "", append([]string{"--server", cl.url, "submit", "--backend", "k8s"}, args...)...)
		return strings.TrimSpace(out)
	}

	// No image and no default: refused at submit, naming it.
	_, errOut, err := runCLI(t, "", "", "--server", cl.url, "submit", "--backend", "k8s", "--", "true")
	if exitCode(err) != 2 || !strings.Contains(errOut, "image") {
		t.Fatalf("submit with no image: exit %d, %q", exitCode(err), errOut)
	}

	// Runs to success, in a pod of the right spec.
	id := submit("--gpus", "2", "--image", "nvcr.io/nvidia/pytorch:25.01-py3", "--", "python", "train.py")
	p := api.awaitPod("ml", id)
	c := p.Spec.Containers[0]
	if p.Spec.NodeName != "gpu-1" || p.Spec.RestartPolicy != "Never" || c.Image != "nvcr.io/nvidia/pytorch:25.01-py3" ||
		c.Resources.Limits["nvidia.com/gpu"] != "2" || strings.Join(c.Command, " ") != "python train.py" || p.Metadata.Labels["berth.dev/backend"] != "k8s" {
		t.Fatalf("pod %+v", p)
	}
	api.setStatus("ml", p, "Running", podRunning)
	cl.awaitState(id, 30*time.Second, berth.JobRunning)
	if out := mustCLI(t, "", "", "--server", cl.url, "workers"); !strings.Contains(out, "k8s/gpu-1") {
		t.Fatalf("berth workers does not list the node:\n%s", out)
	}
	api.setStatus("ml", p, "Succeeded", exitedWith(0, "Completed"))
	cl.awaitState(id, 30*time.Second, berth.JobSucceeded)
	cl.eventually(30*time.Second, "the ended pod deleted", func() bool { return len(api.pods("ml", "berth.dev/job="+id)) == 0 })

	// Unschedulable: the job's pending reason, then failed past the deadline.
	id = submit("--gpus", "1", "--image", "img:1", "--", "true")
	p = api.awaitPod("ml", id)
	api.do("PATCH", "/api/v1/namespaces/ml/pods/"+p.Metadata.Name+"/status", "application/merge-patch+json",
		map[string]any{"status": map[string]any{"conditions": []map[string]string{{"type": "PodScheduled", "status": "False",
			"reason": "Unschedulable", "message": "0/1 nodes are available: 1 node(s) had untolerated taint."}}}}, nil)
	cl.eventually(30*time.Second, "the pending reason", func() bool {
		out := mustCLI(t, "", "", "--server", cl.url, "job", id)
		return strings.Contains(out, "Unschedulable") && strings.Contains(out, "untolerated taint")
	})
	d := cl.awaitState(id, 30*time.Second, berth.JobFailed)
	if a := d.AttemptList[len(d.AttemptList)-1]; a.FailureClass != berth.FailureUnschedulable {
		t.Fatalf("attempt %+v", a)
	}

	// Cancel deletes the pod with the server's grace.
	id = submit("--image", "img:1", "--", "sleep", "1000")
	p = api.awaitPod("ml", id)
	api.setStatus("ml", p, "Running", podRunning)
	cl.awaitState(id, 30*time.Second, berth.JobRunning)
	mustCLI(t, "", "", "--server", cl.url, "cancel", id)
	cl.eventually(30*time.Second, "the pod deleting", func() bool {
		pods := api.pods("ml", "berth.dev/job="+id)
		return len(pods) == 1 && pods[0].Metadata.DeletionTimestamp != nil
	})
	api.do("DELETE", "/api/v1/namespaces/ml/pods/"+p.Metadata.Name, "application/json", map[string]any{"gracePeriodSeconds": 0}, nil)
	cl.awaitState(id, 30*time.Second, berth.JobCancelled)

	// A restarted server adopts the running pod.
	id = submit("--image", "img:1", "--", "sleep", "1000")
	p = api.awaitPod("ml", id)
	api.setStatus("ml", p, "Running", podRunning)
	cl.awaitState(id, 30*time.Second, berth.JobRunning)
	cl.server.stop()
	cl.startServer()
	cl.awaitBackend("k8s", 30*time.Second, berth.BackendReady)
	api.setStatus("ml", p, "Succeeded", exitedWith(0, "Completed"))
	d = cl.awaitState(id, 30*time.Second, berth.JobSucceeded)
	if len(d.AttemptList) != 1 {
		t.Fatalf("%d attempts after the restart, want the one adopted", len(d.AttemptList))
	}
}

// TestKubeFailover: two servers on one PostgreSQL database, a Kubernetes
// backend added on the leader; a job's pod runs, the leader is killed
// (SIGKILL), and the standby that takes over adopts the pod: no second
// pod, no second attempt, and the job succeeds when the pod does.
func TestKubeFailover(t *testing.T) {
	t.Parallel()
	ks := kubetest.Start(t)
	api := newKubeAPI(t, ks)
	api.addNode("gpu-1", 4)
	pair := startHAPair(t)
	a, b, urlA, urlB, token := pair.a, pair.b, pair.urlA, pair.urlB, pair.token
	mustCLI(t, token, "", "--server", urlA, "backend", "add", "k8s", "--kind", "kubernetes", "--kubeconfig", inlineKubeconfig(t, ks), "--namespace", "ha")
	ready := func(url string) {
		t.Helper()
		c := client.New(url, token, nil)
		deadline := time.Now().Add(60 * time.Second)
		for {
			list, err := c.Backends(context.Background())
			if err == nil && len(list) == 2 && list[1].Status.State == berth.BackendReady {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("backend not ready on %s: %+v, %v", url, list, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	ready(urlA)
	id := strings.TrimSpace(mustCLI(t, token, "", "--server", urlA, "submit", "--backend", "k8s", "--image", "img:1", "--", "sleep", "1000"))
	p := api.awaitPod("ha", id)
	api.setStatus("ha", p, "Running", podRunning)
	state := func(url string, want berth.JobState) *berth.JobDetail {
		t.Helper()
		c := client.New(url, token, nil)
		deadline := time.Now().Add(60 * time.Second)
		for {
			d, err := c.Job(context.Background(), id)
			if err == nil && d.State == want {
				return d
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s on %s: %+v, %v; want %s", id, url, d, err, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	state(urlA, berth.JobRunning)

	a.kill()
	if _, ok := b.out.await("listening on", 60*time.Second); !ok {
		t.Fatal("the standby did not take over within a minute of the leader's death")
	}
	ready(urlB)
	if got := api.awaitPod("ha", id); got.Metadata.Name != p.Metadata.Name {
		t.Fatalf("pod %s after the failover, want %s", got.Metadata.Name, p.Metadata.Name)
	}
	api.setStatus("ha", p, "Succeeded", exitedWith(0, "Completed"))
	if d := state(urlB, berth.JobSucceeded); len(d.AttemptList) != 1 {
		t.Fatalf("%d attempts: the new leader made another", len(d.AttemptList))
	}
}
