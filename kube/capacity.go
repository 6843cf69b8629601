package kube

import (
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
)

// workers returns the scheduler's view of a backend's nodes: one worker
// per node its selector admits, its id "BACKEND/NODE", its GPUs the
// node's allocatable nvidia.com/gpu (of the model its
// nvidia.com/gpu.product label names) less what other pods than the
// backend's own request there, and so its CPUs, memory and pod slots; a
// node cordoned or not Ready is parked (takes no new work). The backend's
// own pods are left out unless withOwn: the controller counts the
// attempts it placed.
func workers(spec *berth.BackendSpec, nodes []*corev1.Node, pods []*corev1.Pod, withOwn bool) []*berth.Worker {
	type use struct {
		gpus, pods int64
		cpu, mem   int64 // milli-CPUs, bytes
	}
	used := map[string]*use{}
	for _, p := range pods {
		if p.Spec.NodeName == "" || (!withOwn && p.Labels[LabelBackend] == spec.Name) || terminal(p) {
			continue
		}
		u := used[p.Spec.NodeName]
		if u == nil {
			u = &use{}
			used[p.Spec.NodeName] = u
		}
		u.pods++
		for _, c := range p.Spec.Containers {
			u.gpus += max(c.Resources.Requests.Name(ResourceGPU, "").Value(), c.Resources.Limits.Name(ResourceGPU, "").Value())
			u.cpu += c.Resources.Requests.Cpu().MilliValue()
			u.mem += c.Resources.Requests.Memory().Value()
		}
	}
	out := make([]*berth.Worker, 0, len(nodes))
	for _, n := range nodes {
		if !selects(spec.Kubernetes.NodeSelector, n.Labels) {
			continue
		}
		u := used[n.Name]
		if u == nil {
			u = &use{}
		}
		alloc := n.Status.Allocatable
		w := &berth.Worker{ID: spec.Name + "/" + n.Name, Host: n.Name, Queues: spec.Queues, Labels: maps.Clone(n.Labels),
			CPUs:   float64(max(alloc.Cpu().MilliValue()-u.cpu, 0)) / 1000,
			Memory: berth.Bytes(max(alloc.Memory().Value()-u.mem, 0)),
			Slots:  int(max(alloc.Pods().Value()-u.pods, 0)),
			State:  berth.WorkerReady, Version: n.Status.NodeInfo.KubeletVersion}
		for i := range max(alloc.Name(ResourceGPU, "").Value()-u.gpus, 0) {
			w.GPUs = append(w.GPUs, berth.GPU{Index: int(i), Model: n.Labels[LabelGPUProduct]})
		}
		if spec.Kubernetes.ImageDefault == "" {
			if w.Labels == nil {
				w.Labels = map[string]string{}
			}
			w.Labels[scheduler.ImageRequiredLabel] = "true" // a job naming no image cannot run here
		}
		if n.Spec.Unschedulable || !ready(n) {
			w.State = berth.WorkerParked
		}
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b *berth.Worker) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// terminal reports whether p has ended.
func terminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// selects reports whether labels have every key and value of sel.
func selects(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// ready reports whether n's Ready condition is True.
func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
