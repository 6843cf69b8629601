package kube

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/controller"
	"github.com/berth-dev/berth/internal/freeport"
	"github.com/berth-dev/berth/internal/kubetest"
)

// fakeHost is a controller.BackendHost that records the reports.
type fakeHost struct {
	mu      sync.Mutex
	workers []*berth.Worker
	started []string
	ended   map[string]controller.AttemptEnd
	logs    map[string]string
	changed chan struct{} // a report arrived
}

func newFakeHost() *fakeHost {
	return &fakeHost{ended: map[string]controller.AttemptEnd{}, logs: map[string]string{}, changed: make(chan struct{}, 1)}
}

func (h *fakeHost) report(fn func()) {
	h.mu.Lock()
	fn()
	h.mu.Unlock()
	select {
	case h.changed <- struct{}{}:
	default:
	}
}

func (h *fakeHost) SetWorkers(w []*berth.Worker)         { h.report(func() { h.workers = w }) }
func (h *fakeHost) Started(id string)                    { h.report(func() { h.started = append(h.started, id) }) }
func (h *fakeHost) Pending(string, string)               {}
func (h *fakeHost) Logger() *slog.Logger                 { return slog.New(slog.DiscardHandler) }
func (h *fakeHost) Secrets(*berth.Job) map[string]string { return nil }
func (h *fakeHost) Grace() time.Duration                 { return time.Second }
func (h *fakeHost) Durable(fn func())                    { fn() }
func (h *fakeHost) Ended(id string, e controller.AttemptEnd) {
	h.report(func() { h.ended[id] = e })
}
func (h *fakeHost) Log(id, _ string, data []byte)                { h.report(func() { h.logs[id] += string(data) }) }
func (h *fakeHost) Reconcile(_, _ []string, done func([]string)) { done(nil) }

// wait waits, up to 30 s, for cond to hold of the reports.
func (h *fakeHost) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		h.mu.Lock()
		ok := cond()
		h.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-h.changed:
		case <-timeout:
			t.Fatalf("no report: %s", what)
		}
	}
}

func newBackend(t *testing.T, cs kubernetes.Interface, name string, h *fakeHost) *Backend {
	t.Helper()
	b, err := NewWith(berth.BackendSpec{Name: name, Kind: berth.BackendKindKubernetes,
		Kubernetes: &berth.KubernetesBackend{Kubeconfig: "x", Namespace: name, ImageDefault: "example.invalid/default:1"}},
		h, Options{Client: cs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func testJob(id string, gpus int) (*berth.Job, *berth.Attempt) {
	spec := berth.DefaultJobSpec()
	spec.Command, spec.Resources.GPUs = berth.Argv{"true"}, gpus
	return &berth.Job{ID: id, JobSpec: spec}, &berth.Attempt{ID: id + "A", JobID: id, WorkerID: "x/gpu-1", Host: "gpu-1"}
}

// TestCapacityAndOneCreate: a node's GPUs less another tenant's pod's,
// cordoned parked; two backends (two controllers) launching one attempt
// make one pod, and neither fails it.
func TestCapacityAndOneCreate(t *testing.T) {
	srv := kubetest.Start(t)
	cs := clientset(t, srv)
	addNode(t, cs, "gpu-1", 4, "NVIDIA-H100-80GB-HBM3")
	h1, h2 := newFakeHost(), newFakeHost()
	b1, b2 := newBackend(t, cs, "two", h1), newBackend(t, cs, "two", h2)
	h1.wait(t, "one node of 4 GPUs", func() bool { return len(h1.workers) == 1 && len(h1.workers[0].GPUs) == 4 })
	h1.mu.Lock()
	w := h1.workers[0]
	h1.mu.Unlock()
	if w.ID != "two/gpu-1" || w.GPUs[0].Model != "NVIDIA-H100-80GB-HBM3" || w.State != berth.WorkerReady || w.Slots != 110 {
		t.Fatalf("worker %+v", w)
	}

	other, _ := testJob("OTHER", 1)
	other.Image = "example.invalid/other:1"
	pod, _, err := translate(other, &berth.Attempt{ID: "OTHER"}, nil, podSpec{namespace: "default", node: "gpu-1", image: other.Image})
	if err != nil {
		t.Fatal(err)
	}
	pod.Labels = nil // another tenant's: no Berth label
	if _, err := cs.CoreV1().Pods("default").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h1.wait(t, "3 GPUs left", func() bool { return len(h1.workers) == 1 && len(h1.workers[0].GPUs) == 3 })

	j, a := testJob("01JOB", 2)
	b1.Launch(j, a, nil)
	await(t, "the pod", func() (bool, string) {
		_, err := cs.CoreV1().Pods("two").Get(t.Context(), PodName(a.ID), metav1.GetOptions{})
		return err == nil, "not created"
	})
	// The second controller's create, after the first's, in the test's
	// goroutine: it finds the pod there.
	pod2, _, err := translate(j, a, nil, podSpec{backend: "two", namespace: "two", node: "gpu-1", image: "example.invalid/default:1"})
	if err != nil {
		t.Fatal(err)
	}
	b2.create(op{pod: pod2, attempt: a.ID})
	pods, err := cs.CoreV1().Pods("two").List(t.Context(), metav1.ListOptions{})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("%d pods (%v), want 1", len(pods.Items), err)
	}
	if pods.Items[0].Spec.Containers[0].Image != "example.invalid/default:1" {
		t.Fatalf("image %q: want the backend's default", pods.Items[0].Spec.Containers[0].Image)
	}
	h2.mu.Lock()
	if len(h2.ended) != 0 {
		t.Fatalf("ended %v: a create that found the pod failed it", h2.ended)
	}
	h2.mu.Unlock()
	await(t, "the status", func() (bool, string) {
		s := b1.Status()
		return s.State == berth.BackendReady && s.Nodes == 1 && s.GPUsTotal == 4 && s.GPUsFree == 1 && s.Pods == 1, fmt.Sprintf("%+v", s)
	})

	n, err := cs.CoreV1().Nodes().Get(t.Context(), "gpu-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.Unschedulable = true
	if _, err := cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h1.wait(t, "the node parked", func() bool { return len(h1.workers) == 1 && h1.workers[0].State == berth.WorkerParked })
}

// TestLogs streams a running pod's log into the host, before its end
// (the fake clientset: the test API server has no kubelet to serve logs).
func TestLogs(t *testing.T) {
	cs := fake.NewClientset()
	h := newFakeHost()
	b := newBackend(t, cs, "logs", h)
	j, a := testJob("01LOG", 0)
	b.Launch(j, a, nil)
	var p *corev1.Pod
	await(t, "the pod", func() (bool, string) {
		var err error
		p, err = cs.CoreV1().Pods("logs").Get(t.Context(), PodName(a.ID), metav1.GetOptions{})
		return err == nil, "not created"
	})
	p.Status.Phase = corev1.PodSucceeded
	if _, err := cs.CoreV1().Pods("logs").UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.wait(t, "the end", func() bool { _, ok := h.ended[a.ID]; return ok })
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.logs[a.ID] != "fake logs" || len(h.started) != 1 || h.ended[a.ID].State != berth.AttemptSucceeded {
		t.Fatalf("logs %q, started %v, ended %+v", h.logs[a.ID], h.started, h.ended[a.ID])
	}
}

// TestUnreachableSaysWhy: a backend whose API server cannot be reached
// (a loopback port nothing listens on) is unreachable, saying why, rather
// than syncing in silence.
func TestUnreachableSaysWhy(t *testing.T) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freeport.ForTest(t)))
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://%s", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, addr)
	b, err := NewWith(berth.BackendSpec{Name: "gone", Kind: berth.BackendKindKubernetes,
		Kubernetes: &berth.KubernetesBackend{Kubeconfig: kubeconfig, Namespace: "gone"}}, newFakeHost(), Options{Tick: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	deadline := time.Now().Add(30 * time.Second)
	for s := b.Status(); s.State != berth.BackendUnreachable; s = b.Status() {
		if s.State != berth.BackendSyncing || time.Now().After(deadline) {
			t.Fatalf("status %+v, want unreachable", s)
		}
		time.Sleep(10 * time.Millisecond) // polling a status that signals nothing
	}
	if s := b.Status(); !strings.Contains(s.Message, "cannot reach the API server") || !strings.Contains(s.Message, addr) {
		t.Fatalf("message %q", s.Message)
	}
}
