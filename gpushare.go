package berth

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// WholeGPU is a whole GPU in milli-GPUs, the unit the scheduler counts a
// GPU's share in (docs/gpu-sharing.md).
const WholeGPU = 1000

// GPUsMilli returns what one node of a job asks of GPUs, in milli-GPUs:
// its whole GPUs times WholeGPU, or its fraction (GPUMilli).
func (r *Resources) GPUsMilli() int { return r.GPUs*WholeGPU + r.GPUMilli }

// WantsGPUs reports whether r asks for any GPU, whole or a fraction.
func (r *Resources) WantsGPUs() bool { return r.GPUs > 0 || r.GPUMilli > 0 }

// GPUDevices returns how many GPUs one node of a job asking r uses: its
// whole GPUs, or the one GPU a fraction shares.
func (r *Resources) GPUDevices() int {
	if r.GPUMilli > 0 {
		return 1
	}
	return r.GPUs
}

// MilliOn returns the share of GPU g a fraction r takes there, in
// milli-GPUs: its GPUMilli, or more where its GPUMemory is a larger part
// of g's memory (20GiB of an 80GiB GPU is 250), so that the fractions on
// one GPU never claim more than its memory either. 0 for a request of
// whole GPUs or none.
func (r *Resources) MilliOn(g GPU) int {
	if r.GPUMilli == 0 {
		return 0
	}
	m := r.GPUMilli
	if r.GPUMemory > 0 && g.Memory > 0 {
		m = max(m, int(min(WholeGPU, (int64(r.GPUMemory)*WholeGPU+int64(g.Memory)-1)/int64(g.Memory))))
	}
	return m
}

// FormatGPUs writes milli milli-GPUs as a number of GPUs: "2", "0.5",
// "0.125".
func FormatGPUs(milli int) string {
	if milli%WholeGPU == 0 {
		return strconv.Itoa(milli / WholeGPU)
	}
	return strconv.FormatFloat(float64(milli)/WholeGPU, 'f', -1, 64)
}

// ParseGPUs reads a number of GPUs as `--gpus` and `gpus:` take it: a
// whole number (JobSpec.Validate checks its range) or a fraction of one GPU below 1 with
// at most three decimals ("0.5", "0.25"). It returns the whole GPUs and the
// fraction's milli-GPUs, one of them 0. Its errors say what is wrong, not
// where.
func ParseGPUs(s string) (gpus, milli int, err error) {
	s = strings.TrimSpace(s)
	f, perr := strconv.ParseFloat(s, 64)
	switch {
	case perr != nil || math.IsNaN(f) || math.IsInf(f, 0):
		return 0, 0, fmt.Errorf("%q is not a number of GPUs such as 2 or 0.5", s)
	case f < 0:
		return 0, 0, fmt.Errorf("%s: must not be negative", s)
	case f == math.Trunc(f) && f > 1<<30:
		return 0, 0, fmt.Errorf("%s: must be between 0 and %d", s, MaxGPUsPerWorker)
	case f == math.Trunc(f):
		return int(f), 0, nil // its range is the spec's to check (resources.gpus)
	case f > 1:
		return 0, 0, fmt.Errorf("%s: a fraction of a GPU must be below 1 (a fraction never spans GPUs): ask for %d or %d GPUs, or a fraction such as 0.5",
			s, int(f), int(f)+1)
	}
	m := math.Round(f * WholeGPU)
	if m < 1 || math.Abs(m-f*WholeGPU) > 1e-6 {
		return 0, 0, fmt.Errorf("%s: a fraction of a GPU is counted in thousandths: 0.001 to 0.999 (three decimals at most)", s)
	}
	return 0, int(m), nil
}

// gpuCount is the value of "gpus" in JSON: a whole number of GPUs or a
// fraction of one, in milli-GPUs.
type gpuCount int

// UnmarshalJSON accepts a number: 2, 0.5.
func (c *gpuCount) UnmarshalJSON(data []byte) error {
	s := string(data)
	if s == "null" {
		return nil
	}
	if len(data) == 0 || !strings.ContainsRune("-0123456789", rune(data[0])) {
		return rejectValue[gpuCount]("must be a number of GPUs such as 2 or 0.5")
	}
	gpus, milli, err := ParseGPUs(s)
	if err != nil {
		return rejectValue[gpuCount](err.Error())
	}
	*c = gpuCount(gpus*WholeGPU + milli)
	return nil
}

// UnmarshalJSON reads Resources field by field, taking in "gpus" a whole
// number of GPUs or a fraction of one below 1 (0.5), which is kept in
// GPUMilli as gpu_milli. Like encoding/json's own decoding it ignores
// unknown fields; internal/strict refuses them.
func (r *Resources) UnmarshalJSON(data []byte) error {
	type fields Resources // no methods: decoded field by field
	var v struct {
		fields
		GPUs *gpuCount `json:"gpus,omitempty"` // shadows fields.GPUs
	}
	v.fields = fields(*r)
	if err := json.Unmarshal(data, &v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			typeErr.Field = strings.TrimPrefix(typeErr.Field, "fields.") // the path as Resources' own
		}
		return err
	}
	out := Resources(v.fields)
	if v.GPUs != nil {
		out.GPUs = int(*v.GPUs) / WholeGPU
		if m := int(*v.GPUs) % WholeGPU; m != 0 {
			if out.GPUMilli != 0 {
				return &json.UnmarshalTypeError{Field: "gpus", Type: reflect.TypeFor[gpuCount](),
					Value: "give a fraction in gpus or in gpu_milli, not both"}
			}
			out.GPUMilli = m
		}
	}
	*r = out
	return nil
}
