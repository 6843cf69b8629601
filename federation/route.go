package federation

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
)

// Candidate is a peer as routing sees it: its name, its state and its
// last capability heartbeat (nil before the first).
type Candidate struct {
	Name     string
	State    berth.PeerState
	Capacity *berth.PeerCapacity
}

// Route picks the peer a job of spec is handed to: a ready peer whose
// heartbeat shows enough workers (spec.Nodes) that serve the job's queue,
// have its labels and could ever run one member of it (scheduler.NeverFits:
// GPUs of the type, memory and count asked for, CPUs, memory), preferring
// one where that many are on and have the GPUs free now, then the first
// by name. With none, peer is "" and why says what each peer lacks, by
// name: "b: resources.gpus: 8 requested; the largest worker has
// 4xA100:80GiB; c: unreachable". A job pinned to a host fits no peer:
// hosts are this cluster's.
func Route(spec *berth.JobSpec, peers []Candidate) (peer, why string) {
	peers = slices.SortedFunc(slices.Values(peers), func(a, b Candidate) int { return cmp.Compare(a.Name, b.Name) })
	var lacks []string
	for _, c := range peers {
		now, lack := fits(spec, c)
		switch {
		case lack != "":
			lacks = append(lacks, c.Name+": "+lack)
		case now:
			return c.Name, "" // the first by name with room now
		case peer == "":
			peer = c.Name
		}
	}
	if peer != "" {
		return peer, ""
	}
	if len(peers) == 0 {
		return "", "no federation peer"
	}
	return "", strings.Join(lacks, "; ")
}

// fits reports what c lacks to ever run a job of spec ("" when it could),
// and whether it could start it now.
func fits(spec *berth.JobSpec, c Candidate) (now bool, lack string) {
	switch {
	case c.State == berth.PeerNew:
		return false, "not heard from yet"
	case c.State != berth.PeerReady:
		return false, string(c.State)
	case c.Capacity == nil:
		return false, "no capability heartbeat yet"
	case spec.Constraints.Host != "":
		return false, fmt.Sprintf("host %q requested; a peer's hosts are its own", spec.Constraints.Host)
	}
	var ws, free []*scheduler.Worker // those that serve the job; of those, the ones on with the GPUs free
	served := false
	for _, pw := range c.Capacity.Workers {
		if len(pw.Queues) > 0 && !slices.Contains(pw.Queues, spec.Queue) {
			continue
		}
		served = true
		if !hasLabels(pw.Labels, spec.Constraints.Labels) {
			continue
		}
		w := &scheduler.Worker{Queues: pw.Queues, Labels: pw.Labels, GPUs: pw.GPUs, CPUs: pw.CPUs, Memory: pw.Memory, Off: pw.Off}
		ws = append(ws, w)
		if !pw.Off && pw.FreeGPUs >= spec.Resources.GPUDevices() {
			free = append(free, w)
		}
	}
	switch {
	case !served:
		return false, fmt.Sprintf("no worker serves queue %q", spec.Queue)
	case len(ws) == 0:
		return false, fmt.Sprintf("no worker of queue %q has the labels %s", spec.Queue, labelsText(spec.Constraints.Labels))
	}
	if err := scheduler.NeverFits(slices.Values(ws), &spec.Resources, spec.Nodes); err != nil {
		return false, err.Error()
	}
	return len(free) >= max(spec.Nodes, 1) && scheduler.NeverFits(slices.Values(free), &spec.Resources, spec.Nodes) == nil, ""
}

// hasLabels reports whether have has every label of want.
func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// labelsText writes labels as k=v, by key.
func labelsText(labels map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, k+"="+labels[k])
	}
	return strings.Join(parts, ",")
}
