package main

import (
	"testing"

	"github.com/berth-dev/berth"
)

func TestGPUSummaryCountsEachModel(t *testing.T) {
	t.Parallel()
	gpus, err := berth.ParseGPUSpec("2xA100:40GiB,1xT4:16GiB")
	if err != nil {
		t.Fatal(err)
	}
	if got := gpuSummary(gpus); got != "2xA100:40GiB,1xT4:16GiB" {
		t.Errorf("gpuSummary(2 A100s and a T4) = %q, want 2xA100:40GiB,1xT4:16GiB", got)
	}
}
