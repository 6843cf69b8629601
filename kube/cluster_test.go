package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/controller"
	"github.com/berth-dev/berth/internal/kubetest"
	"github.com/berth-dev/berth/sqlite"
)

// clientset returns a clientset of s.
func clientset(t testing.TB, s *kubetest.Server) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: s.URL, BearerToken: s.Token, QPS: 500, Burst: 1000,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.CA}})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// addNode registers a Ready node with gpus nvidia.com/gpu of model product.
func addNode(t testing.TB, cs kubernetes.Interface, name string, gpus int64, product string) {
	t.Helper()
	capacity := corev1.ResourceList{ResourceGPU: *resource.NewQuantity(gpus, resource.DecimalSI),
		corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods: resource.MustParse("110")}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelGPUProduct: product, "zone": "a"}}}
	n, err := cs.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status = corev1.NodeStatus{Capacity: capacity, Allocatable: capacity,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// secrets resolves every user's secrets from one map.
type secrets map[string]string

var secretRef = regexp.MustCompile(`\{\{SECRET:([A-Za-z0-9_]+)\}\}`)

func (s secrets) Resolve(_ string, texts ...string) map[string]string {
	out := map[string]string{}
	for _, t := range texts {
		for _, m := range secretRef.FindAllStringSubmatch(t, -1) {
			if v, ok := s[m[1]]; ok {
				out[m[1]] = v
			}
		}
	}
	return out
}

func (s secrets) Missing(_ string, texts ...string) []string {
	var out []string
	for _, t := range texts {
		for _, m := range secretRef.FindAllStringSubmatch(t, -1) {
			if _, ok := s[m[1]]; !ok {
				out = append(out, m[1])
			}
		}
	}
	return out
}

// cluster is a controller on SQLite with a Kubernetes backend on a real
// API server.
type cluster struct {
	t    testing.TB
	srv  *kubetest.Server
	cs   kubernetes.Interface
	c    *controller.Controller
	stop func()
	db   string
	name string
}

// fastDeadlines give up on a pending pod within a fraction of a second.
var fastDeadlines = Deadlines{Unschedulable: 300 * time.Millisecond, ImagePull: 300 * time.Millisecond, Config: 300 * time.Millisecond}

// startController starts a controller on db with backend name (namespace
// name) added.
func startController(t testing.TB, srv *kubetest.Server, cs kubernetes.Interface, db, name string, edit func(*berth.KubernetesBackend)) *cluster {
	t.Helper()
	st, err := sqlite.Open(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	c := controller.New(controller.Config{Store: st, Grace: 3 * time.Second, Secrets: secrets{"TOKEN": "s3cret"},
		BackendKinds: map[string]controller.BackendFactory{berth.BackendKindKubernetes: func(spec berth.BackendSpec, host controller.BackendHost) (controller.Backend, error) {
			return NewWith(spec, host, Options{Client: cs, Deadlines: fastDeadlines, Tick: 50 * time.Millisecond})
		}}})
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
		st.Close()
	}
	t.Cleanup(stop)
	k := &berth.KubernetesBackend{Kubeconfig: "unused: the test's client", Namespace: name}
	if edit != nil {
		edit(k)
	}
	if err := c.AddBackend(t.Context(), berth.BackendSpec{Name: name, Kind: berth.BackendKindKubernetes, Kubernetes: k}); err != nil {
		t.Fatal(err)
	}
	return &cluster{t: t, srv: srv, cs: cs, c: c, stop: stop, db: db, name: name}
}

// submit submits a job to the backend, its spec edited by edit.
func (k *cluster) submit(edit func(*berth.JobSpec)) string {
	k.t.Helper()
	spec := berth.DefaultJobSpec()
	spec.Command, spec.Backend, spec.Image = berth.Argv{"python", "train.py"}, k.name, "example.invalid/trainer:1"
	if edit != nil {
		edit(&spec)
	}
	jobs, err := k.c.Submit(k.t.Context(), &berth.SubmitRequest{JobSpec: spec})
	if err != nil {
		k.t.Fatalf("submit: %v", err)
	}
	return jobs[0].ID
}

// await polls until cond holds; what it waits on is the API server's or
// the controller's answer, which the test cannot be told of otherwise.
func await(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %s", what, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// job waits until job id satisfies cond and returns it.
func (k *cluster) job(id string, cond func(*berth.JobDetail) bool) *berth.JobDetail {
	k.t.Helper()
	var d *berth.JobDetail
	await(k.t, "job "+id, func() (bool, string) {
		var err error
		if d, err = k.c.Job(k.t.Context(), id); err != nil {
			k.t.Fatal(err)
		}
		return cond(d), fmt.Sprintf("state %s, reason %q", d.State, d.Reason)
	})
	return d
}

// pod waits for the pod of job id's latest attempt and returns it.
func (k *cluster) pod(id string) *corev1.Pod {
	k.t.Helper()
	var p *corev1.Pod
	await(k.t, "the pod of job "+id, func() (bool, string) {
		d, err := k.c.Job(k.t.Context(), id)
		if err != nil || len(d.AttemptList) == 0 {
			return false, fmt.Sprint("no attempt: ", err)
		}
		p, err = k.cs.CoreV1().Pods(k.name).Get(k.t.Context(), PodName(d.AttemptList[len(d.AttemptList)-1].ID), metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	return p
}

// gone waits until pod name is deleted.
func (k *cluster) gone(name string) {
	k.t.Helper()
	await(k.t, "pod "+name+" deleted", func() (bool, string) {
		p, err := k.cs.CoreV1().Pods(k.name).Get(k.t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return true, ""
		}
		return p.DeletionTimestamp != nil, "still there"
	})
}

// setStatus plays the kubelet: it writes p's phase and its container's
// state.
func (k *cluster) setStatus(p *corev1.Pod, phase corev1.PodPhase, cs *corev1.ContainerState) {
	k.t.Helper()
	p, err := k.cs.CoreV1().Pods(p.Namespace).Get(k.t.Context(), p.Name, metav1.GetOptions{})
	if err != nil {
		k.t.Fatal(err)
	}
	p.Status.Phase = phase
	if cs != nil {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: container, Image: p.Spec.Containers[0].Image, State: *cs}}
	}
	if _, err := k.cs.CoreV1().Pods(p.Namespace).UpdateStatus(k.t.Context(), p, metav1.UpdateOptions{}); err != nil {
		k.t.Fatal(err)
	}
}

func exited(code int32, reason string) *corev1.ContainerState {
	return &corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason}}
}

// TestBackend runs jobs on a real API server, the test playing the
// kubelet: the pod's spec, its run to success, an OOM kill, a pod
// unschedulable past its deadline, a cancel, a restart of the controller
// that adopts its pods and deletes one no longer wanted, and two
// controllers creating one attempt's pod.
func TestBackend(t *testing.T) {
	srv := kubetest.Start(t)
	cs := clientset(t, srv)
	addNode(t, cs, "gpu-1", 4, "NVIDIA-A100-SXM4-80GB")

	t.Run("succeeds", func(t *testing.T) {
		k := startController(t, srv, cs, filepath.Join(t.TempDir(), "b.db"), "ok", nil)
		id := k.submit(func(s *berth.JobSpec) {
			s.Resources = berth.Resources{GPUs: 2, CPUs: 1.5, Memory: 2 << 30, GPUType: "a100"}
			s.Env = map[string]string{"PLAIN": "x", "AUTH": "Bearer {{SECRET:TOKEN}}"}
			s.Command = berth.Argv{"sh", "-c", "echo $(date) {{SECRET:TOKEN}}"}
			s.Constraints.Labels = map[string]string{"zone": "a"}
		})
		p := k.pod(id)
		c := p.Spec.Containers[0]
		switch {
		case p.Spec.NodeName != "gpu-1" || p.Spec.RestartPolicy != corev1.RestartPolicyNever:
			t.Fatalf("node %q, restart %q", p.Spec.NodeName, p.Spec.RestartPolicy)
		case p.Labels[LabelJob] != id || p.Labels[LabelBackend] != "ok" || p.Labels[LabelAttempt] == "":
			t.Fatalf("labels %v", p.Labels)
		case c.Image != "example.invalid/trainer:1" || c.Resources.Limits.Name(ResourceGPU, "").Value() != 2:
			t.Fatalf("image %q, limits %v", c.Image, c.Resources.Limits)
		case c.Resources.Requests.Cpu().MilliValue() != 1500 || c.Resources.Limits.Memory().Value() != 2<<30:
			t.Fatalf("requests %v, limits %v", c.Resources.Requests, c.Resources.Limits)
		case strings.Join(c.Command, " ") != "sh -c $(BERTH_ARG_2)":
			t.Fatalf("command %q", c.Command)
		}
		terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions
		if len(terms) != 2 || terms[0].Key != "zone" || terms[1].Key != LabelGPUProduct || terms[1].Values[0] != "NVIDIA-A100-SXM4-80GB" {
			t.Fatalf("affinity %+v", terms)
		}
		sec, err := cs.CoreV1().Secrets("ok").Get(t.Context(), p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if string(sec.Data["AUTH"]) != "Bearer s3cret" || string(sec.Data["BERTH_ARG_2"]) != "echo $(date) s3cret" {
			t.Fatalf("secret %q", sec.Data)
		}
		for _, e := range c.Env {
			if e.Name == "AUTH" && (e.Value != "" || e.ValueFrom == nil) {
				t.Fatalf("AUTH in the pod's spec: %+v", e)
			}
		}
		k.setStatus(p, corev1.PodRunning, &corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})
		k.job(id, func(d *berth.JobDetail) bool { return d.State == berth.JobRunning })
		k.setStatus(p, corev1.PodSucceeded, exited(0, "Completed"))
		k.job(id, func(d *berth.JobDetail) bool { return d.State == berth.JobSucceeded })
		k.gone(p.Name)
	})

	t.Run("oom", func(t *testing.T) {
		k := startController(t, srv, cs, filepath.Join(t.TempDir(), "b.db"), "oom", nil)
		id := k.submit(func(s *berth.JobSpec) { s.Resources.GPUs = 1 })
		p := k.pod(id)
		k.setStatus(p, corev1.PodRunning, &corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})
		k.setStatus(p, corev1.PodFailed, exited(137, "OOMKilled"))
		d := k.job(id, func(d *berth.JobDetail) bool { return d.State == berth.JobFailed })
		a := d.AttemptList[len(d.AttemptList)-1]
		if a.FailureClass != berth.FailureOOM || a.ExitCode == nil || *a.ExitCode != 137 {
			t.Fatalf("attempt %+v", a)
		}
	})

	t.Run("unschedulable", func(t *testing.T) {
		k := startController(t, srv, cs, filepath.Join(t.TempDir(), "b.db"), "unsched", nil)
		id := k.submit(func(s *berth.JobSpec) { s.Resources.GPUs = 1 })
		p := k.pod(id)
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: ReasonUnschedulable,
			Message: "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."}}
		if _, err := cs.CoreV1().Pods("unsched").UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		d := k.job(id, func(d *berth.JobDetail) bool { return d.State == berth.JobFailed })
		a := d.AttemptList[len(d.AttemptList)-1]
		if a.FailureClass != berth.FailureUnschedulable || !strings.Contains(a.Reason, "Unschedulable") {
			t.Fatalf("attempt %+v", a)
		}
		k.gone(p.Name)
	})

	t.Run("no image", func(t *testing.T) {
		k := startController(t, srv, cs, filepath.Join(t.TempDir(), "b.db"), "noimage", nil)
		refused(t, k, "image", func(s *berth.JobSpec) { s.Image = "" })
		// A job that names no backend is never placed on a cluster with no
		// default image: it waits, saying why.
		id := k.submit(func(s *berth.JobSpec) { s.Image, s.Backend = "", "" })
		d := k.job(id, func(d *berth.JobDetail) bool { return strings.Contains(d.Reason, "no image") })
		if d.State != berth.JobPending || len(d.AttemptList) != 0 {
			t.Fatalf("job %s with %d attempts, reason %q", d.State, len(d.AttemptList), d.Reason)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		k := startController(t, srv, cs, filepath.Join(t.TempDir(), "b.db"), "cancel", nil)
		id := k.submit(nil)
		p := k.pod(id)
		k.setStatus(p, corev1.PodRunning, &corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})
		k.job(id, func(d *berth.JobDetail) bool { return d.State == berth.JobRunning })
		if _, err := k.c.Cancel(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		var grace int64
		await(t, "the pod deleted with its grace", func() (bool, string) {
			got, err := cs.CoreV1().Pods("cancel").Get(t.Context(), p.Name, metav1.GetOptions{})
			if err != nil || got.DeletionTimestamp == nil {
				return false, fmt.Sprint("not deleting: ", err)
			}
			grace = *got.DeletionGracePeriodSeconds
			return true, ""
		})
		if grace != 3 {
			t.Fatalf("grace %d, want the controller's 3 s", grace)
		}
		zero := int64(0) // the kubelet's part: the container stopped, the pod goes
		if err := cs.CoreV1().Pods("cancel").Delete(t.Context(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		k.job(id, func(d *berth.JobDetail) bool { return d.State == berth.JobCancelled })
	})

	t.Run("restart adopts", func(t *testing.T) {
		db := filepath.Join(t.TempDir(), "b.db")
		k := startController(t, srv, cs, db, "adopt", nil)
		id := k.submit(nil)
		p := k.pod(id)
		k.setStatus(p, corev1.PodRunning, &corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})
		k.job(id, func(d *berth.JobDetail) bool { return d.State == berth.JobRunning })
		k.stop()
		stray := p.DeepCopy()
		stray.ObjectMeta = metav1.ObjectMeta{Name: PodName("01STRAY"), Namespace: "adopt",
			Labels: map[string]string{LabelBackend: "adopt", LabelAttempt: "01STRAY", LabelJob: "01STRAYJOB"}}
		stray.Status = corev1.PodStatus{}
		if _, err := cs.CoreV1().Pods("adopt").Create(t.Context(), stray, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		k = startController(t, srv, cs, db, "adopt", nil)
		k.gone(stray.Name)
		k.setStatus(p, corev1.PodSucceeded, exited(0, "Completed"))
		d := k.job(id, func(d *berth.JobDetail) bool { return d.State == berth.JobSucceeded })
		if len(d.AttemptList) != 1 {
			t.Fatalf("%d attempts: the restart made another", len(d.AttemptList))
		}
	})
}

// TestKubePlacement: with placement kube the pod is left to kube-scheduler
// (no nodeName); a gang is refused while the cluster serves no PodGroup,
// and once it does goes in one (minMember its size, deleted with its
// pods).
func TestKubePlacement(t *testing.T) {
	srv := kubetest.Start(t)
	cs := clientset(t, srv)
	addNode(t, cs, "gpu-1", 8, "NVIDIA-H100-80GB-HBM3")
	addNode(t, cs, "gpu-2", 8, "NVIDIA-H100-80GB-HBM3")
	k := startController(t, srv, cs, filepath.Join(t.TempDir(), "b.db"), "kp", func(kb *berth.KubernetesBackend) {
		kb.Placement = berth.PlacementKube
	})
	id := k.submit(func(s *berth.JobSpec) { s.Resources.GPUs = 1 })
	if p := k.pod(id); p.Spec.NodeName != "" {
		t.Fatalf("pod bound to %q: kube-scheduler's to place", p.Spec.NodeName)
	}
	refused(t, k, "nodes", func(s *berth.JobSpec) { s.Resources.GPUs, s.Nodes = 4, 2 })
	gang := k.submit(func(s *berth.JobSpec) { s.Resources.GPUs, s.Nodes, s.Backend = 4, 2, "" })
	d := k.job(gang, func(d *berth.JobDetail) bool { return d.State == berth.JobFailed })
	if !strings.Contains(d.Reason, "gang") {
		t.Fatalf("gang: %q", d.Reason)
	}

	// Where the cluster serves PodGroups, a gang's pods go in one.
	crd := `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"podgroups.scheduling.x-k8s.io"},
	"spec":{"group":"scheduling.x-k8s.io","scope":"Namespaced","names":{"kind":"PodGroup","plural":"podgroups","singular":"podgroup"},
	"versions":[{"name":"v1alpha1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}`
	if err := cs.Discovery().RESTClient().Post().AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions").
		SetHeader("Content-Type", "application/json").Body([]byte(crd)).Do(t.Context()).Error(); err != nil {
		t.Fatal(err)
	}
	await(t, "PodGroups served", func() (bool, string) { return servesPodGroups(cs), "not yet" })
	k = startController(t, srv, cs, filepath.Join(t.TempDir(), "b.db"), "kpg", func(kb *berth.KubernetesBackend) {
		kb.Placement = berth.PlacementKube
	})
	spec := berth.DefaultJobSpec()
	spec.Command, spec.Backend, spec.Image, spec.Nodes, spec.Resources.GPUs = berth.Argv{"true"}, "kpg", "img:1", 2, 4
	var jobs []*berth.Job
	await(t, "the gang accepted once the backend has synced", func() (bool, string) {
		var err error
		jobs, err = k.c.Submit(t.Context(), &berth.SubmitRequest{JobSpec: spec})
		return err == nil, fmt.Sprint(err)
	})
	group := "berth-" + strings.ToLower(jobs[0].ID) + "-1"
	var members []corev1.Pod
	await(t, "both members' pods", func() (bool, string) {
		pods, err := cs.CoreV1().Pods("kpg").List(t.Context(), metav1.ListOptions{LabelSelector: LabelPodGroup + "=" + group})
		if err != nil {
			return false, err.Error()
		}
		members = pods.Items
		return len(members) == 2, fmt.Sprintf("%d pods", len(members))
	})
	var pg struct {
		Spec struct {
			MinMember int `json:"minMember"`
		} `json:"spec"`
	}
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/apis", PodGroupVersion, "namespaces", "kpg", "podgroups", group).DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &pg); err != nil || pg.Spec.MinMember != 2 {
		t.Fatalf("pod group %s: %s (%v)", group, raw, err)
	}
	for i := range members {
		k.setStatus(&members[i], corev1.PodSucceeded, exited(0, "Completed"))
	}
	k.job(jobs[0].ID, func(d *berth.JobDetail) bool { return d.State == berth.JobSucceeded })
	await(t, "the pod group deleted", func() (bool, string) {
		err := cs.Discovery().RESTClient().Get().AbsPath("/apis", PodGroupVersion, "namespaces", "kpg", "podgroups", group).Do(t.Context()).Error()
		return err != nil, "still there"
	})
}

// refused submits a job to k's backend, edited by edit, and requires it
// refused as invalid on field.
func refused(t *testing.T, k *cluster, field string, edit func(*berth.JobSpec)) {
	t.Helper()
	spec := berth.DefaultJobSpec()
	spec.Command, spec.Backend, spec.Image = berth.Argv{"true"}, k.name, "example.invalid/trainer:1"
	edit(&spec)
	_, err := k.c.Submit(t.Context(), &berth.SubmitRequest{JobSpec: spec})
	var e *berth.Error
	if !errors.As(err, &e) || e.Code != berth.ECodeInvalid || e.Field != field {
		t.Fatalf("submit: %v, want refused on %s", err, field)
	}
}

// TestGangRendezvous: a gang's members reach rank 0 through a headless
// Service in the cluster's DNS, not through a node's name (which a pod on
// the pod network cannot resolve): the Service selects rank 0's pod, its
// port is the rendezvous port, every member's MASTER_ADDR names it, and
// it is deleted with rank 0's pod.
func TestGangRendezvous(t *testing.T) {
	srv := kubetest.Start(t)
	cs := clientset(t, srv)
	addNode(t, cs, "gpu-1", 8, "NVIDIA-H100-80GB-HBM3")
	addNode(t, cs, "gpu-2", 8, "NVIDIA-H100-80GB-HBM3")
	k := startController(t, srv, cs, filepath.Join(t.TempDir(), "b.db"), "gang", nil)
	var id string
	await(t, "the gang accepted once the backend has synced", func() (bool, string) {
		spec := berth.DefaultJobSpec()
		spec.Command, spec.Backend, spec.Image, spec.Nodes, spec.Resources.GPUs = berth.Argv{"torchrun", "train.py"}, "gang", "img:1", 2, 8
		jobs, err := k.c.Submit(t.Context(), &berth.SubmitRequest{JobSpec: spec})
		if err == nil {
			id = jobs[0].ID
		}
		return err == nil, fmt.Sprint(err)
	})
	name := GangServiceName(&berth.Job{ID: id, Attempts: 1})
	var members []corev1.Pod
	await(t, "both members' pods", func() (bool, string) {
		pods, err := cs.CoreV1().Pods("gang").List(t.Context(), metav1.ListOptions{LabelSelector: LabelGang + "=" + name})
		if err != nil {
			return false, err.Error()
		}
		members = pods.Items
		return len(members) == 2, fmt.Sprintf("%d pods", len(members))
	})
	svc, err := cs.CoreV1().Services("gang").Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || !maps.Equal(svc.Spec.Selector, map[string]string{LabelGang: name, LabelRank: "0"}) ||
		len(svc.Spec.Ports) != 1 {
		t.Fatalf("service %+v", svc.Spec)
	}
	checkMembers(t, members, svc)

	// A restart after the attempts were made but before their pods were
	// (here: the pods and the service deleted while the server is down)
	// launches both again, with the same rendezvous.
	k.stop()
	for _, p := range members {
		if err := cs.CoreV1().Pods("gang").Delete(t.Context(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cs.CoreV1().Services("gang").Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	k = startController(t, srv, cs, k.db, "gang", nil)
	var again []corev1.Pod
	await(t, "both members' pods made again", func() (bool, string) {
		pods, err := cs.CoreV1().Pods("gang").List(t.Context(), metav1.ListOptions{LabelSelector: LabelGang + "=" + name})
		if err != nil {
			return false, err.Error()
		}
		again = slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
		return len(again) == 2, fmt.Sprintf("%d pods", len(again))
	})
	svc2, err := cs.CoreV1().Services("gang").Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkMembers(t, again, svc2)
	if svc2.Spec.Ports[0].Port != svc.Spec.Ports[0].Port {
		t.Fatalf("rendezvous port %d after the restart, %d before", svc2.Spec.Ports[0].Port, svc.Spec.Ports[0].Port)
	}
	members = again
	for i := range members {
		k.setStatus(&members[i], corev1.PodSucceeded, exited(0, "Completed"))
	}
	k.job(id, func(d *berth.JobDetail) bool { return d.State == berth.JobSucceeded })
	await(t, "the rendezvous service deleted", func() (bool, string) {
		_, err := cs.CoreV1().Services("gang").Get(t.Context(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// checkMembers checks the pods of a gang of two: ranks 0 and 1, each
// pointed at rank 0 through the rendezvous service svc.
func checkMembers(t *testing.T, members []corev1.Pod, svc *corev1.Service) {
	t.Helper()
	if len(svc.Spec.Ports) != 1 {
		t.Fatalf("service ports %v", svc.Spec.Ports)
	}
	ranks := map[string]bool{}
	for _, p := range members {
		env := map[string]string{}
		for _, e := range p.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		ranks[p.Labels[LabelRank]] = true
		addr := svc.Name + "." + svc.Namespace + ".svc"
		if env["MASTER_ADDR"] != addr || env["MASTER_PORT"] != fmt.Sprint(svc.Spec.Ports[0].Port) ||
			env["BERTH_COORDINATOR"] != addr+":"+env["MASTER_PORT"] || env["WORLD_SIZE"] != "2" ||
			env["RANK"] != p.Labels[LabelRank] {
			t.Fatalf("pod %s env %v", p.Name, env)
		}
	}
	if !ranks["0"] || !ranks["1"] {
		t.Fatalf("ranks %v", ranks)
	}
}

// TestRemoveDeletesPods: removing a backend (forced, while an attempt runs
// there) deletes its pods and Secrets, so that the lost attempt does not
// run on beside its retry; another tenant's pod is left alone.
func TestRemoveDeletesPods(t *testing.T) {
	srv := kubetest.Start(t)
	cs := clientset(t, srv)
	addNode(t, cs, "gpu-1", 8, "NVIDIA-H100-80GB-HBM3")
	k := startController(t, srv, cs, filepath.Join(t.TempDir(), "b.db"), "rm", nil)
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: "rm"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img:1"}}}}
	if _, err := cs.CoreV1().Pods("rm").Create(t.Context(), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	id := k.submit(func(s *berth.JobSpec) { s.Resources.GPUs, s.Env = 1, map[string]string{"T": "{{SECRET:TOKEN}}"} })
	p := k.pod(id)
	if _, err := cs.CoreV1().Secrets("rm").Get(t.Context(), p.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the attempt's secret: %v", err)
	}
	k.setStatus(p, corev1.PodRunning, &corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})
	k.job(id, func(d *berth.JobDetail) bool { return d.State == berth.JobRunning })
	if err := k.c.RemoveBackend(t.Context(), "rm"); err != nil {
		t.Fatal(err)
	}
	k.gone(p.Name)
	if _, err := cs.CoreV1().Secrets("rm").Get(t.Context(), p.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("secret %s: %v, want deleted", p.Name, err)
	}
	if tp, err := cs.CoreV1().Pods("rm").Get(t.Context(), "tenant", metav1.GetOptions{}); err != nil || tp.DeletionTimestamp != nil {
		t.Fatalf("the other tenant's pod: %v", err)
	}
}
