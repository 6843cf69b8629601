package strict

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

func TestDecodeYAML(t *testing.T) {
	t.Parallel()
	var ok berth.SubmitRequest
	if err := DecodeYAML([]byte("# a job\ncommand: [python, train.py]\narray: 3\nresources: {gpus: 2, gpu_memory: 0, memory: 16GiB}\n"+
		"max_runtime: 90m\nenv: {EPOCHS: \"3\"}\n"), &ok); err != nil ||
		len(ok.Command) != 2 || ok.Array != 3 || ok.Resources.GPUs != 2 || ok.Resources.Memory != 16<<30 ||
		ok.MaxRuntime != berth.Duration(90*time.Minute) || ok.Env["EPOCHS"] != "3" {
		t.Fatalf("DecodeYAML of a good file = %+v, %v", ok, err)
	}
	for _, tt := range []struct {
		doc, field, part string
	}{
		{"command: [unclosed\n", "", "not valid YAML"},
		{"comand: [x]\n", "comand", `unknown field "comand"`},
		{"command: [x]\nresources: {gpu_typ: H100}\n", "resources.gpu_typ", `unknown field "resources.gpu_typ"`},
		{"command: [x]\nconstraints:\n  labels: {xyz: a}\n  xyz: 1\n", "constraints.xyz", `unknown field "constraints.xyz"`},
		{"command: [x]\narray: many\n", "array", "must be a whole number"},
		{"command: [x]\npriority: high\n", "priority", "must be a whole number"}, // a field of the embedded JobSpec
		{"command: [x]\nresources: {memory: -5GiB}\n", "resources.memory", `"-5GiB" is not a size`},
		{"command: [x]\nresources: {memory: NaNGiB}\n", "resources.memory", `"NaNGiB" is not a size`},
		{"command: [x]\nresources: {memory: [1]}\n", "resources.memory", "must be a size such as 80GiB"},
		{"command: [x]\nmax_runtime: soon\n", "max_runtime", `"soon" is not a duration such as 90s`},
		// A duration or size needs its unit in a file (0 needs none); the
		// API takes bare numbers of seconds and bytes from programs.
		{"command: [x]\nmax_runtime: 90\n", "max_runtime", "90 is a bare number; write the unit: a duration such as 90s, 90m or 90h"},
		{"command: [x]\nresources: {memory: 16000}\n", "resources.memory", "16000 is a bare number; write the unit: a size such as 16000GiB"},
		{"command: [x]\nresources: {gpu_memory: 1.5}\n", "resources.gpu_memory", "1.5 is a bare number"},
		{"command: [x]\nresources: {memory: \"16000\"}\n", "resources.memory", "16000 is a bare number"}, // quoted, too
		// A value of the wrong type in a map is named by its key.
		{"command: [x]\nenv: {NAME: x, EPOCHS: 3}\n", "env.EPOCHS", `must be a string; quote it: "3"`},
		{"command: [x]\nenv: {DEBUG: true}\n", "env.DEBUG", "must be a string"},
		{"command: {run: x}\n", "command", "must be a list of strings or one shell command string"},
		// A fraction of one GPU: below 1, in thousandths, never also in gpu_milli.
		{"command: [x]\nresources: {gpus: 1.5}\n", "resources.gpus", "a fraction never spans GPUs"},
		{"command: [x]\nresources: {gpus: 0.0001}\n", "resources.gpus", "thousandths"},
		{"command: [x]\nresources: {gpus: 0.5, gpu_milli: 500}\n", "resources.gpus", "not both"},
		{"command: [x]\nresources: {gpus: [1]}\n", "resources.gpus", "must be a number of GPUs"},
		{"[1, 2]\n", "", "must be an object"},
	} {
		var req berth.SubmitRequest
		err := DecodeYAML([]byte(tt.doc), &req)
		var e *berth.Error
		if !errors.As(err, &e) || e.Code != berth.ECodeInvalid || e.Field != tt.field || !strings.Contains(e.Message, tt.part) {
			t.Errorf("DecodeYAML(%q) = %v; want invalid, field %q, saying %q", tt.doc, err, tt.field, tt.part)
		}
	}
	var frac berth.SubmitRequest
	if err := DecodeYAML([]byte("command: [x]\nresources: {gpus: 0.5, gpu_memory: 20GiB}\n"), &frac); err != nil ||
		frac.Resources.GPUMilli != 500 || frac.Resources.GPUs != 0 || frac.Resources.GPUMemory != 20<<30 {
		t.Errorf("DecodeYAML of gpus: 0.5 = %+v, %v; want gpu_milli 500", frac.Resources, err)
	}
	for _, doc := range []string{"", "\n  \n", "# only a comment\n"} {
		var req berth.SubmitRequest
		if err := DecodeYAML([]byte(doc), &req); err != ErrEmptyYAML {
			t.Errorf("DecodeYAML(%q) = %v, want ErrEmptyYAML", doc, err)
		}
	}
}
