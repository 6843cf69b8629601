package controller

import (
	"strings"
	"testing"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
)

// TestAttemptSaysHowFGDPlacedIt: under the fgd policy the attempt's
// reason, shown by berth job while it runs, says how the worker was
// chosen; under the default it says nothing.
func TestAttemptSaysHowFGDPlacedIt(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"fgd", "berth"} {
		cfg, err := scheduler.PolicyConfig(policy)
		if err != nil {
			t.Fatal(err)
		}
		h := newLifecycleHarnessWith(t, func(c *Config) { c.Scheduler = &cfg })
		reg := workerReg()
		reg.GPUs = []berth.GPU{{Index: 0, Model: "A100"}, {Index: 1, Model: "A100"}}
		h.worker(reg)
		h.submit(func(spec *berth.JobSpec) { spec.Resources.GPUs = 1 }, "true")
		got := h.launched().a.Reason
		if want := "fgd: fragmentation grows by "; policy == "fgd" && !strings.HasPrefix(got, want) || policy == "berth" && got != "" {
			t.Errorf("%s: the attempt's reason is %q", policy, got)
		}
	}
}
