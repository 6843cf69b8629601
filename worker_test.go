package berth

import (
	"errors"
	"testing"
)

func TestGPUHasType(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		model, typ string
		want       bool
	}{
		{"NVIDIA A100-SXM4-80GB", "A100", true},
		{"NVIDIA A100-SXM4-80GB", "a100", true},
		{"NVIDIA A100-SXM4-80GB", "A10", false},
		{"NVIDIA A10", "A10", true},
		{"NVIDIA L40S", "L4", false},
		{"NVIDIA L4", "L4", true},
		{"NVIDIA L40S", "L40S", true},
		{"Tesla T4", "T4", true},
		{"NVIDIA H100 80GB HBM3", "H100", true},
		{"NVIDIA H100 80GB HBM3", "100", false},
		{"NVIDIA GeForce RTX 4090", "RTX 4090", true},
		{"NVIDIA A10G A100", "A100", true}, // a later whole-word match counts
		{"H100", "H100", true},
		{"H100", "", true},
		{"", "H100", false},
	} {
		if got := (GPU{Model: tc.model}).HasType(tc.typ); got != tc.want {
			t.Errorf("GPU %q HasType(%q) = %v, want %v", tc.model, tc.typ, got, tc.want)
		}
	}
}

func TestGPUSpecRoundTrips(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"2xA100:40GiB,1xT4:16GiB", "4xH100:80GiB", ""} {
		gpus, err := ParseGPUSpec(spec)
		if err != nil {
			t.Fatal(err)
		}
		if got := GPUSpec(gpus); got != spec {
			t.Errorf("GPUSpec(ParseGPUSpec(%q)) = %q", spec, got)
		}
	}
}

func TestValidAdvertise(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"127.0.0.1", "10.1.2.3", "::1", "fe80::1", "gpu-7", "gpu-7.example.com"} {
		if err := ValidAdvertise("--advertise", ok); err != nil {
			t.Errorf("ValidAdvertise(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "10.0.0.1:7070", "[::1]", "http://gpu-7", "gpu-7/x", "gpu 7", "-gpu", "gpu_7"} {
		err := ValidAdvertise("--advertise", bad)
		var e *Error
		if !errors.As(err, &e) || e.Field != "--advertise" || e.Code != ECodeInvalid {
			t.Errorf("ValidAdvertise(%q) = %v, want an invalid error naming --advertise", bad, err)
		}
	}
}
