package berth_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
)

// TestParseGPUs: whole numbers and fractions below 1 in thousandths; a
// fraction over 1 (it would span GPUs), finer than 0.001, negative or not
// a number is refused.
func TestParseGPUs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in          string
		gpus, milli int
		wantErr     string
	}{
		{"0", 0, 0, ""}, {"2", 2, 0, ""}, {"0.5", 0, 500, ""}, {".25", 0, 250, ""}, {"0.125", 0, 125, ""},
		{"0.001", 0, 1, ""}, {"0.999", 0, 999, ""}, {"1.0", 1, 0, ""},
		{"1.5", 0, 0, "never spans GPUs"}, {"0.0005", 0, 0, "thousandths"}, {"0.1234", 0, 0, "thousandths"},
		{"-1", 0, 0, "negative"}, {"x", 0, 0, "not a number"}, {"NaN", 0, 0, "not a number"}, {"65", 65, 0, ""}, {"1e12", 0, 0, "between 0 and 64"},
	} {
		g, m, err := berth.ParseGPUs(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseGPUs(%q) = %d, %d, %v; want an error saying %q", tc.in, g, m, err, tc.wantErr)
			}
			continue
		}
		if err != nil || g != tc.gpus || m != tc.milli {
			t.Errorf("ParseGPUs(%q) = %d, %d, %v; want %d, %d", tc.in, g, m, err, tc.gpus, tc.milli)
		}
	}
	for milli, want := range map[int]string{500: "0.5", 2000: "2", 125: "0.125", 0: "0"} {
		if got := berth.FormatGPUs(milli); got != want {
			t.Errorf("FormatGPUs(%d) = %q, want %q", milli, got, want)
		}
	}
}

// TestResourcesJSON: "gpus" takes a fraction into gpu_milli, whole GPUs
// stay whole and are written as before; a fraction in both gpus and
// gpu_milli is refused.
func TestResourcesJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want berth.Resources
	}{
		{`{"gpus":0.5}`, berth.Resources{GPUMilli: 500}},
		{`{"gpus":0.25,"gpu_memory":"20GiB"}`, berth.Resources{GPUMilli: 250, GPUMemory: 20 << 30}},
		{`{"gpu_milli":300}`, berth.Resources{GPUMilli: 300}},
		{`{"gpus":4,"cpus":2}`, berth.Resources{GPUs: 4, CPUs: 2}},
		{`{}`, berth.Resources{}},
	} {
		var r berth.Resources
		if err := json.Unmarshal([]byte(tc.in), &r); err != nil || r != tc.want {
			t.Errorf("Unmarshal(%s) = %+v, %v; want %+v", tc.in, r, err, tc.want)
		}
	}
	out, _ := json.Marshal(berth.Resources{GPUs: 2})
	if string(out) != `{"gpus":2}` {
		t.Errorf("whole GPUs written as %s", out)
	}
	out, _ = json.Marshal(berth.Resources{GPUMilli: 500})
	if string(out) != `{"gpu_milli":500}` {
		t.Errorf("a fraction written as %s", out)
	}
	var r berth.Resources
	for _, bad := range []string{`{"gpus":0.5,"gpu_milli":500}`, `{"gpus":1.5}`, `{"gpus":"0.5"}`} {
		if err := json.Unmarshal([]byte(bad), &r); err == nil {
			t.Errorf("Unmarshal(%s) succeeded; want an error", bad)
		}
	}
}

// TestFractionValidate: a fraction is 1..999 milli and never beside whole
// GPUs; gpu_memory and gpu_type accept a fraction as asking for a GPU.
func TestFractionValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		r     berth.Resources
		field string
	}{
		{berth.Resources{GPUMilli: 500, GPUMemory: 20 << 30, GPUType: "H100"}, ""},
		{berth.Resources{GPUMilli: 1000}, "resources.gpu_milli"},
		{berth.Resources{GPUMilli: -1}, "resources.gpu_milli"},
		{berth.Resources{GPUs: 1, GPUMilli: 500}, "resources.gpu_milli"},
		{berth.Resources{GPUMemory: 1 << 30}, "resources.gpu_memory"},
	} {
		s := berth.DefaultJobSpec()
		s.Command, s.Resources = berth.Argv{"true"}, tc.r
		err := s.Validate()
		var be *berth.Error
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%+v: %v; want valid", tc.r, err)
		case tc.field != "" && (!errors.As(err, &be) || be.Field != tc.field):
			t.Errorf("%+v: %v; want an error on %s", tc.r, err, tc.field)
		}
	}
}

// TestMilliOn: a fraction's share of a GPU is its milli, or more where
// the GPU memory it asks for is a larger part of that GPU's.
func TestMilliOn(t *testing.T) {
	t.Parallel()
	g80 := berth.GPU{Model: "H100", Memory: 80 << 30}
	g40 := berth.GPU{Model: "A100", Memory: 40 << 30}
	for _, tc := range []struct {
		r    berth.Resources
		g    berth.GPU
		want int
	}{
		{berth.Resources{GPUMilli: 500}, g80, 500},
		{berth.Resources{GPUMilli: 250, GPUMemory: 20 << 30}, g80, 250},
		{berth.Resources{GPUMilli: 250, GPUMemory: 20 << 30}, g40, 500},
		{berth.Resources{GPUMilli: 100, GPUMemory: 60 << 30}, g40, 1000},
		{berth.Resources{GPUs: 2}, g80, 0},
	} {
		if got := tc.r.MilliOn(tc.g); got != tc.want {
			t.Errorf("%+v on %s: %d, want %d", tc.r, tc.g.Memory, got, tc.want)
		}
	}
}
