package berth

import "testing"

func TestPeerCapacitySummary(t *testing.T) {
	t.Parallel()
	gpus := func(model string, n int) []GPU {
		out := make([]GPU, n)
		for i := range out {
			out[i] = GPU{Index: i, Model: model, Memory: 80 << 30}
		}
		return out
	}
	c := &PeerCapacity{Workers: []PeerWorker{
		{GPUs: gpus("H100", 4), FreeGPUs: 2},
		{GPUs: gpus("A100", 4), FreeGPUs: 4, Off: true},
		{GPUs: gpus("H100", 4), FreeGPUs: 4},
		{CPUs: 16},
	}}
	if got := c.Summary(); got != "H100 6/8, A100 0/4" {
		t.Errorf("Summary = %q, want H100 6/8, A100 0/4", got)
	}
	if got := (*PeerCapacity)(nil).Summary(); got != "" {
		t.Errorf("Summary of no heartbeat = %q", got)
	}
}
