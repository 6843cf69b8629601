package federation

import (
	"slices"
	"testing"

	"github.com/berth-dev/berth"
)

const gib = berth.Bytes(1 << 30)

// gpus is n GPUs of model with mem each.
func gpus(n int, model string, mem berth.Bytes) []berth.GPU {
	out := make([]berth.GPU, n)
	for i := range out {
		out[i] = berth.GPU{Index: i, Model: model, Memory: mem}
	}
	return out
}

// ready is a ready peer with workers.
func ready(name string, ws ...berth.PeerWorker) Candidate {
	return Candidate{Name: name, State: berth.PeerReady, Capacity: &berth.PeerCapacity{Workers: ws}}
}

// h100s is a worker of 8 H100s, free of them.
func h100s(free int) berth.PeerWorker {
	return berth.PeerWorker{GPUs: gpus(8, "NVIDIA H100 80GB HBM3", 80*gib), FreeGPUs: free, CPUs: 64, Memory: 512 * gib}
}

// job asks for n GPUs of type on nodes.
func job(n int, typ string, nodes int) *berth.JobSpec {
	s := berth.DefaultJobSpec()
	s.Resources = berth.Resources{GPUs: n, GPUType: typ}
	s.Nodes = nodes
	return &s
}

func TestRoute(t *testing.T) {
	a100 := berth.PeerWorker{GPUs: gpus(4, "NVIDIA A100-SXM4-80GB", 80*gib), FreeGPUs: 4, CPUs: 32, Memory: 256 * gib}
	peers := []Candidate{
		ready("d", h100s(8)),
		{Name: "a", State: berth.PeerUnreachable, Capacity: &berth.PeerCapacity{Workers: []berth.PeerWorker{h100s(8)}}},
		ready("b", a100),
		ready("c", h100s(0), h100s(0)),
		{Name: "e", State: berth.PeerNew},
		{Name: "f", State: berth.PeerReady},
		{Name: "g", State: berth.PeerLost, Capacity: &berth.PeerCapacity{Workers: []berth.PeerWorker{h100s(8)}}},
	}
	offH100 := h100s(8)
	offH100.Off = true
	labelled := h100s(8)
	labelled.Labels = map[string]string{"zone": "eu"}
	batchOnly := h100s(8)
	batchOnly.Queues = []string{"batch"}
	withHost := job(1, "", 1)
	withHost.Constraints.Host = "gpu7"
	withLabels := job(1, "", 1)
	withLabels.Constraints.Labels = map[string]string{"zone": "us", "rack": "r1"}
	for _, tc := range []struct {
		name      string
		spec      *berth.JobSpec
		peers     []Candidate
		peer, why string
	}{
		{"free capacity now wins over name order", job(8, "H100", 1), peers, "d", ""},
		{"the first by name when none is free now", job(8, "H100", 2), peers, "c", ""},
		{"an off worker is not free now", job(8, "H100", 1), []Candidate{ready("b", offH100), ready("c", h100s(8))}, "c", ""},
		{"an off worker still fits", job(8, "H100", 1), []Candidate{ready("b", offH100), ready("c", h100s(0))}, "b", ""},
		{"a CPU job on the first ready peer with a worker on", job(0, "", 1), peers, "b", ""},
		{"no GPUs of the count", job(8, "A100", 1), peers[1:4],
			"", `a: unreachable; b: resources.gpus: 8 requested; the largest worker has 4 of type A100 (4xNVIDIA A100-SXM4-80GB:80GiB); c: resources.gpu_type: "A100" requested; the workers have NVIDIA H100 80GB HBM3`},
		{"too few workers", job(8, "H100", 2), []Candidate{ready("d", h100s(8))},
			"", "d: nodes: 2 requested; only 1 worker has 8 GPUs of type H100"},
		{"states and no heartbeat", job(1, "", 1), []Candidate{peers[4], peers[5], peers[6]},
			"", "e: not heard from yet; f: no capability heartbeat yet; g: lost"},
		{"the queue", job(1, "", 1), []Candidate{ready("q", batchOnly)}, "", `q: no worker serves queue "default"`},
		{"the labels", withLabels, []Candidate{ready("l", labelled)}, "", `l: no worker of queue "default" has the labels rack=r1,zone=us`},
		{"a host pin", withHost, []Candidate{ready("d", h100s(8))}, "", `d: host "gpu7" requested; a peer's hosts are its own`},
		{"no peers", job(1, "", 1), nil, "", "no federation peer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := slices.Clone(tc.peers)
			for range 2 { // whatever the order given
				given := slices.Clone(ps)
				peer, why := Route(tc.spec, ps)
				if peer != tc.peer || why != tc.why {
					t.Fatalf("Route = %q, %q\nwant %q, %q", peer, why, tc.peer, tc.why)
				}
				if !slices.EqualFunc(ps, given, func(a, b Candidate) bool { return a.Name == b.Name }) {
					t.Fatalf("Route reordered its argument")
				}
				slices.Reverse(ps)
			}
		})
	}
}
