package kubetest_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/berth-dev/berth/internal/kubetest"
)

const gpu corev1.ResourceName = "nvidia.com/gpu"

// clientset returns a client-go clientset for s, as the Kubernetes backend
// will build one.
func clientset(t *testing.T, s *kubetest.Server) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: s.URL, BearerToken: s.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.CA}})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// gpuNode is a Node with gpus nvidia.com/gpu in its capacity.
func gpuNode(name string, gpus int64) *corev1.Node {
	capacity := corev1.ResourceList{
		gpu:                   *resource.NewQuantity(gpus, resource.DecimalSI),
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity}}
}

// gpuPod is a pod of one container limited to gpus nvidia.com/gpu, bound
// to node.
func gpuPod(name, node string, gpus int64) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"berth.dev/job": name}},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "main", Image: "example.invalid/trainer:1", Command: []string{"python", "train.py"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{gpu: *resource.NewQuantity(gpus, resource.DecimalSI)}}}}}}
}

// TestServer registers a GPU node through a real API server, binds a pod
// to it, plays the kubelet's part (status Running) and reads all of it
// back.
func TestServer(t *testing.T) {
	s := kubetest.Start(t)
	cs := clientset(t, s)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != kubetest.Version {
		t.Errorf("server version %s, want %s", v.GitVersion, kubetest.Version)
	}

	// A node's status is the kubelet's to write: created, then set
	// through the status subresource.
	n, err := cs.CoreV1().Nodes().Create(ctx, gpuNode("gpu-0", 4), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status = gpuNode("gpu-0", 4).Status
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, gpuPod("job-1", "gpu-0", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	n, err = cs.CoreV1().Nodes().Get(ctx, "gpu-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Status.Allocatable[gpu]; got.Value() != 4 {
		t.Errorf("node allocatable %s = %s, want 4", gpu, got.String())
	}
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", "gpu-0").String()})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("%d pods on gpu-0, want 1", len(pods.Items))
	}
	p := pods.Items[0]
	res := p.Spec.Containers[0].Resources
	if lim, req := res.Limits[gpu], res.Requests[gpu]; lim.Value() != 2 || req.Value() != 2 {
		t.Errorf("pod %s: limit %s, request %s, want 2 and 2 (an extended resource's request defaults to its limit)", gpu, lim.String(), req.String())
	}
	if p.Status.Phase != corev1.PodPending {
		t.Errorf("new pod's phase %q, want Pending", p.Status.Phase)
	}

	// Play the kubelet: the pod runs.
	p.Status.Phase = corev1.PodRunning
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", Image: "example.invalid/trainer:1",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, &p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := cs.CoreV1().Pods("default").Get(ctx, "job-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != corev1.PodRunning || got.Spec.NodeName != "gpu-0" || got.Labels["berth.dev/job"] != "job-1" {
		t.Errorf("pod read back: phase %q, node %q, labels %v; want Running on gpu-0, labelled", got.Status.Phase, got.Spec.NodeName, got.Labels)
	}
}

// TestKwok has kwok play the kubelet: a node annotated for it becomes
// Ready, and a GPU pod bound to it Running, both seen through watches.
func TestKwok(t *testing.T) {
	s := kubetest.Start(t)
	s.StartKwok(t)
	cs := clientset(t, s)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	node := gpuNode("kwok-0", 8)
	node.Annotations = map[string]string{kubetest.KwokNodeAnnotation: "fake"}
	nodes, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=kwok-0"})
	if err != nil {
		t.Fatal(err)
	}
	defer nodes.Stop()
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, nodes, "node kwok-0 Ready", func(o any) bool {
		for _, c := range o.(*corev1.Node).Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	})

	pod := gpuPod("job-2", "kwok-0", 8)
	pod.Spec.Tolerations = []corev1.Toleration{{Key: kubetest.KwokNodeAnnotation, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	pods, err := cs.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=job-2"})
	if err != nil {
		t.Fatal(err)
	}
	defer pods.Stop()
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, pods, "pod job-2 Running", func(o any) bool { return o.(*corev1.Pod).Status.Phase == corev1.PodRunning })
}

// waitFor reads w until an object satisfies ok, failing t when the watch
// ends first (its context's deadline).
func waitFor(t *testing.T, w watch.Interface, what string, ok func(any) bool) {
	t.Helper()
	var last string
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			t.Fatalf("waiting for %s: watch error %v", what, ev.Object)
		}
		if ok(ev.Object) {
			return
		}
		last = fmt.Sprintf("%s %+v", ev.Type, ev.Object)
	}
	t.Fatalf("watch ended before %s; last event: %.2000s", what, last)
}

// fatalRecorder is a testing.TB whose Fatal, Fatalf, Skip and Skipf record
// the message and end the goroutine, as the real ones do.
type fatalRecorder struct {
	testing.TB
	msg     string
	skipped bool
}

func (r *fatalRecorder) Fatal(args ...any) { r.msg = fmt.Sprint(args...); runtime.Goexit() }
func (r *fatalRecorder) Fatalf(f string, args ...any) {
	r.msg = fmt.Sprintf(f, args...)
	runtime.Goexit()
}
func (r *fatalRecorder) Skip(args ...any) { r.skipped = true; r.Fatal(args...) }
func (r *fatalRecorder) Skipf(f string, args ...any) {
	r.skipped = true
	r.Fatalf(f, args...)
}
func (r *fatalRecorder) SkipNow() { r.skipped = true; runtime.Goexit() }

// TestStartWithoutBinaries checks that a test needing the binaries fails,
// not skips, where they are absent, and says which script builds them.
func TestStartWithoutBinaries(t *testing.T) {
	t.Setenv(kubetest.BinsEnv, t.TempDir())
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		kubetest.Start(r)
	}()
	<-done
	if r.skipped {
		t.Errorf("Start skipped: %s", r.msg)
	}
	if !strings.Contains(r.msg, ".ci/k8s-bins") || !strings.Contains(r.msg, "etcd") {
		t.Errorf("Start without binaries failed with %q, want a message naming etcd and .ci/k8s-bins", r.msg)
	}
}
