package service

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// wantInvalid fails t unless err is an ECodeInvalid *berth.Error with field
// and a message containing every one of parts.
func wantInvalid(t *testing.T, err error, field string, parts ...string) {
	t.Helper()
	var be *berth.Error
	if !errors.As(err, &be) {
		t.Fatalf("err = %v, want a *berth.Error", err)
	}
	if be.Code != berth.ECodeInvalid || be.Field != field {
		t.Fatalf("err = %q (code %s, field %q), want code invalid, field %q", err, be.Code, be.Field, field)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("err = %q, want it to contain %q", err, p)
		}
	}
}

func templateSpec(tpl string, vars map[string]string) *berth.JobSpec {
	s := berth.DefaultJobSpec()
	s.Template, s.Vars = tpl, vars
	return &s
}

func TestBuiltinValid(t *testing.T) {
	t.Parallel()
	for name, tpl := range Builtin() {
		if tpl.Name != name {
			t.Errorf("Builtin()[%q].Name = %q", name, tpl.Name)
		}
		if err := tpl.Validate(); err != nil {
			t.Errorf("%s: Validate: %v", name, err)
		}
	}
}

func TestExpandBuiltins(t *testing.T) {
	t.Parallel()
	rt := Runtime{ServicePort: 8123, WorkerID: "w1", TaskID: "t1", ModelName: "rt-model", GPUCount: 2,
		GPUDevices: "0,1", ModelCache: "/models", Workspace: "/ws"}
	tests := []struct {
		name     string
		spec     *berth.JobSpec
		wantCmd  berth.Argv // after Expand
		wantRun  berth.Argv // after Render
		wantEnv  map[string]string
		wantPort bool
	}{
		{
			name: "vllm with extra args",
			spec: templateSpec("vllm", map[string]string{"MODEL_NAME": "Qwen/Qwen2-VL-7B-Instruct", "EXTRA_ARGS": " --enforce-eager  --limit-mm-per-prompt image=4 "}),
			wantCmd: berth.Argv{"vllm", "serve", "Qwen/Qwen2-VL-7B-Instruct", "--port", "{{SERVICE_PORT}}", "--host", "0.0.0.0",
				"--served-model-name", "Qwen/Qwen2-VL-7B-Instruct", "--tensor-parallel-size", "{{GPU_COUNT}}", "--gpu-memory-utilization", "{{GPU_MEMORY_UTILIZATION}}",
				"--max-model-len", "8192", "--enforce-eager", "--limit-mm-per-prompt", "image=4"},
			wantRun: berth.Argv{"vllm", "serve", "Qwen/Qwen2-VL-7B-Instruct", "--port", "8123", "--host", "0.0.0.0",
				"--served-model-name", "Qwen/Qwen2-VL-7B-Instruct", "--tensor-parallel-size", "2", "--gpu-memory-utilization", "0.9",
				"--max-model-len", "8192", "--enforce-eager", "--limit-mm-per-prompt", "image=4"},
			wantEnv:  map[string]string{"HF_HOME": "/models"},
			wantPort: true,
		},
		{
			name: "vllm with defaults overridden, no extra args",
			spec: templateSpec("vllm", map[string]string{"MODEL_NAME": "m", "MAX_MODEL_LEN": "32768"}),
			wantCmd: berth.Argv{"vllm", "serve", "m", "--port", "{{SERVICE_PORT}}", "--host", "0.0.0.0",
				"--served-model-name", "m", "--tensor-parallel-size", "{{GPU_COUNT}}", "--gpu-memory-utilization", "{{GPU_MEMORY_UTILIZATION}}", "--max-model-len", "32768"},
			wantRun: berth.Argv{"vllm", "serve", "m", "--port", "8123", "--host", "0.0.0.0",
				"--served-model-name", "m", "--tensor-parallel-size", "2", "--gpu-memory-utilization", "0.9", "--max-model-len", "32768"},
			wantEnv:  map[string]string{"HF_HOME": "/models"},
			wantPort: true,
		},
		{
			name:     "jupyterlab",
			spec:     templateSpec("jupyterlab", nil),
			wantCmd:  berth.Argv{"jupyter", "lab", "--ip", "0.0.0.0", "--port", "{{SERVICE_PORT}}", "--no-browser", "--notebook-dir", "{{WORKSPACE}}"},
			wantRun:  berth.Argv{"jupyter", "lab", "--ip", "0.0.0.0", "--port", "8123", "--no-browser", "--notebook-dir", "/ws"},
			wantPort: true,
		},
		{
			name:     "notebook with the workspace given at submit",
			spec:     templateSpec("notebook", map[string]string{"WORKSPACE": "/home/me/nb"}),
			wantCmd:  berth.Argv{"jupyter", "notebook", "--ip", "0.0.0.0", "--port", "{{SERVICE_PORT}}", "--no-browser", "--notebook-dir", "/home/me/nb"},
			wantRun:  berth.Argv{"jupyter", "notebook", "--ip", "0.0.0.0", "--port", "8123", "--no-browser", "--notebook-dir", "/home/me/nb"},
			wantPort: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := Expand(tc.spec, Builtin()); err != nil {
				t.Fatalf("Expand: %v", err)
			}
			if !slices.Equal(tc.spec.Command, tc.wantCmd) {
				t.Errorf("command = %q\nwant      %q", tc.spec.Command, tc.wantCmd)
			}
			if tc.spec.Kind != berth.KindService {
				t.Errorf("kind = %q, want service", tc.spec.Kind)
			}
			if got := NeedsPort(tc.spec); got != tc.wantPort {
				t.Errorf("NeedsPort = %v, want %v", got, tc.wantPort)
			}
			if err := CheckVars(tc.spec); err != nil {
				t.Errorf("CheckVars after Expand: %v", err)
			}
			run := make(berth.Argv, len(tc.spec.Command))
			for i, a := range tc.spec.Command {
				run[i] = Render(a, rt)
			}
			if !slices.Equal(run, tc.wantRun) {
				t.Errorf("rendered = %q\nwant       %q", run, tc.wantRun)
			}
			env := map[string]string{}
			for k, v := range tc.spec.Env {
				env[k] = Render(v, rt)
			}
			if tc.wantEnv == nil {
				tc.wantEnv = map[string]string{}
			}
			if !maps.Equal(env, tc.wantEnv) {
				t.Errorf("rendered env = %v, want %v", env, tc.wantEnv)
			}
			if err := tc.spec.Validate(); err != nil && !strings.Contains(err.Error(), "template") {
				t.Errorf("expanded spec fails berth validation: %v", err)
			}
		})
	}
}

func TestExpandErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		spec  func(s *berth.JobSpec)
		field string
		parts []string
	}{
		{"unknown template", func(s *berth.JobSpec) { s.Template = "vlm" }, "template",
			[]string{`unknown template "vlm"`, "have: jupyterlab, notebook, vllm"}},
		{"required variable missing", func(s *berth.JobSpec) { s.Vars = nil }, "vars.MODEL_NAME",
			[]string{"required by template vllm"}},
		{"required variable empty", func(s *berth.JobSpec) { s.Vars["MODEL_NAME"] = "" }, "vars.MODEL_NAME",
			[]string{"required by template vllm"}},
		{"unknown variable in own command", func(s *berth.JobSpec) { s.Command = berth.Argv{"vllm", "serve", "{{MODEL}}"} }, "vars",
			[]string{"unknown variable {{MODEL}} in command", "the template vllm declares MODEL_NAME, MAX_MODEL_LEN, EXTRA_ARGS"}},
		{"unknown variable in env", func(s *berth.JobSpec) { s.Env = map[string]string{"X": "a{{FOO}}b"} }, "vars",
			[]string{"unknown variable {{FOO}} in env.X"}},
		{"unknown variable without template", func(s *berth.JobSpec) {
			s.Template, s.Vars, s.Command = "", nil, berth.Argv{"serve", "--port", "{{PORT}}"}
		}, "vars", []string{"unknown variable {{PORT}} in command", "SERVICE_PORT"}},
		{"var neither declared nor used", func(s *berth.JobSpec) { s.Vars["MAX_LEN"] = "4096" }, "vars.MAX_LEN",
			[]string{"not declared by template vllm", "MAX_MODEL_LEN"}},
		{"var unused without template", func(s *berth.JobSpec) { s.Template, s.Command = "", berth.Argv{"true"} }, "vars.MODEL_NAME",
			[]string{"not used"}},
		{"worker variable given", func(s *berth.JobSpec) { s.Vars["SERVICE_PORT"] = "80" }, "vars.SERVICE_PORT",
			[]string{"set on the worker"}},
		{"bad variable name", func(s *berth.JobSpec) { s.Vars["1X"] = "a" }, "vars",
			[]string{`"1X" is not a valid variable name`}},
		{"unknown variable inside a value", func(s *berth.JobSpec) { s.Vars["EXTRA_ARGS"] = "--x {{NOPE}}" }, "vars",
			[]string{"{{NOPE}}"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec := templateSpec("vllm", map[string]string{"MODEL_NAME": "m"})
			tc.spec(spec)
			before := *spec
			before.Command = slices.Clone(spec.Command)
			before.Env = maps.Clone(spec.Env)
			wantInvalid(t, Expand(spec, Builtin()), tc.field, tc.parts...)
			if !reflect.DeepEqual(*spec, before) {
				t.Errorf("Expand changed the spec on error:\n%+v\nwant\n%+v", *spec, before)
			}
		})
	}
}

func TestExpandOverridesAndSecrets(t *testing.T) {
	t.Parallel()
	spec := templateSpec("vllm", map[string]string{"MODEL_NAME": "m", "EXTRA_ARGS": "--api-key {{SECRET:VLLM_KEY}}"})
	spec.Env = map[string]string{"HF_TOKEN": "{{SECRET:HF_TOKEN}}", "HF_HOME": "/mine"}
	if err := Expand(spec, Builtin()); err != nil {
		t.Fatal(err)
	}
	wantEnv := map[string]string{"HF_TOKEN": "{{SECRET:HF_TOKEN}}", "HF_HOME": "/mine"}
	if !maps.Equal(spec.Env, wantEnv) {
		t.Errorf("env = %v, want %v", spec.Env, wantEnv)
	}
	if got := spec.Command[len(spec.Command)-2:]; !slices.Equal(got, []string{"--api-key", "{{SECRET:VLLM_KEY}}"}) {
		t.Errorf("command ends %q, want the secret reference verbatim", got)
	}
	if got := Render("{{SECRET:HF_TOKEN}} {{SERVICE_PORT}}", Runtime{ServicePort: 9000}); got != "{{SECRET:HF_TOKEN}} 9000" {
		t.Errorf("Render = %q", got)
	}

	// The spec's own command replaces the template's and may use its variables.
	own := templateSpec("vllm", map[string]string{"MODEL_NAME": "m"})
	own.Command = berth.Argv{"sh", "-c", "python serve.py {{MODEL_NAME}} {{MAX_MODEL_LEN}} {{SERVICE_PORT}}"}
	if err := Expand(own, Builtin()); err != nil {
		t.Fatal(err)
	}
	if want := (berth.Argv{"sh", "-c", "python serve.py m 8192 {{SERVICE_PORT}}"}); !slices.Equal(own.Command, want) {
		t.Errorf("command = %q, want %q", own.Command, want)
	}
	if own.Env["HF_HOME"] != "{{MODEL_CACHE}}" {
		t.Errorf("template env not kept: %v", own.Env)
	}
}

func TestExpandWithoutTemplate(t *testing.T) {
	t.Parallel()
	spec := berth.DefaultJobSpec()
	spec.Kind = berth.KindService
	spec.Command = berth.Argv{"python", "-m", "http.server", "{{SERVICE_PORT}}", "--directory", "{{DIR}}"}
	spec.Vars = map[string]string{"DIR": "/srv"}
	spec.Env = map[string]string{"WHO": "{{WORKER_ID}}/{{TASK_ID}}"}
	if err := Expand(&spec, nil); err != nil {
		t.Fatal(err)
	}
	if want := (berth.Argv{"python", "-m", "http.server", "{{SERVICE_PORT}}", "--directory", "/srv"}); !slices.Equal(spec.Command, want) {
		t.Errorf("command = %q, want %q", spec.Command, want)
	}
	if !NeedsPort(&spec) {
		t.Error("NeedsPort = false")
	}
	batch := berth.DefaultJobSpec()
	batch.Command = berth.Argv{"true"}
	if err := Expand(&batch, nil); err != nil || batch.Kind != berth.KindBatch || NeedsPort(&batch) {
		t.Errorf("plain batch job: err %v, kind %q, needs port %v", err, batch.Kind, NeedsPort(&batch))
	}
}

func TestCheckVars(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cmd     berth.Argv
		env     map[string]string
		wantErr string // "" for none
	}{
		{"system variables", berth.Argv{"x", "{{SERVICE_PORT}}", "{{GPU_DEVICES}}"}, map[string]string{"A": "{{WORKSPACE}}"}, ""},
		{"secret refs", berth.Argv{"x", "{{SECRET:TOKEN}}"}, map[string]string{"A": "{{SECRET:B}}"}, ""},
		{"not references", berth.Argv{"docker", "inspect", "--format", "{{.State}}", "{{ x }}", "{{"}, nil, ""},
		{"user variable left", berth.Argv{"x", "{{MY_VAR}}"}, nil, "{{MY_VAR}} in command"},
		{"user variable in env", nil, map[string]string{"B": "ok", "A": "{{NOPE}}"}, "{{NOPE}} in env.A"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := CheckVars(&berth.JobSpec{Command: tc.cmd, Env: tc.env})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("CheckVars: %v", err)
				}
				return
			}
			wantInvalid(t, err, "vars", tc.wantErr)
		})
	}
}

func TestRender(t *testing.T) {
	t.Parallel()
	rt := Runtime{ServicePort: 8000, WorkerID: "w", TaskID: "t", ModelName: "m", GPUCount: 1, GPUDevices: "3",
		ModelCache: "/c", Workspace: "/{{TASK_ID}}"}
	tests := []struct{ in, want string }{
		{"--port={{SERVICE_PORT}}", "--port=8000"},
		{"{{WORKER_ID}}/{{TASK_ID}}/{{MODEL_NAME}}/{{GPU_COUNT}}/{{GPU_DEVICES}}/{{MODEL_CACHE}}", "w/t/m/1/3//c"},
		{"{{WORKSPACE}}", "/{{TASK_ID}}"}, // one pass
		{"{{SECRET:X}} {{OTHER}} {{ SERVICE_PORT }}", "{{SECRET:X}} {{OTHER}} {{ SERVICE_PORT }}"},
		{"plain", "plain"},
	}
	for _, tc := range tests {
		if got := Render(tc.in, rt); got != tc.want {
			t.Errorf("Render(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := Render("{{SERVICE_PORT}}", Runtime{}); got != "" {
		t.Errorf("unallocated port renders %q, want empty", got)
	}
	if n := len(rt.Values()); n != 9 {
		t.Errorf("Values has %d entries, want 9", n)
	}
	for milli, want := range map[int]string{0: "0.9", 500: "0.45", 250: "0.225", 1: "0.001"} {
		if got := Render("{{GPU_MEMORY_UTILIZATION}}", Runtime{GPUMilli: milli}); got != want {
			t.Errorf("GPU_MEMORY_UTILIZATION of %d milli = %q, want %q", milli, got, want)
		}
	}
}

func TestReadinessDefaults(t *testing.T) {
	t.Parallel()
	got := Readiness{Probe: Probe{Kind: ProbeHTTP, Path: "/v1/models", ModelIn: "m"}}.WithDefaults()
	want := Readiness{
		Probe: Probe{Kind: ProbeHTTP, Path: "/v1/models", Status: 200, ModelIn: "m"},
		Infra: berth.Duration(2 * time.Minute), Warmup: berth.Duration(20 * time.Minute), Stall: berth.Duration(10 * time.Minute),
		Liveness:  Probe{Kind: ProbeHTTP, Path: "/v1/models", Status: 200},
		LiveEvery: berth.Duration(10 * time.Second), LiveFailures: 3,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("WithDefaults = %+v\nwant %+v", got, want)
	}
	set := Readiness{Infra: berth.Duration(time.Second), Liveness: Probe{Kind: ProbeTCP}, LiveFailures: 7}.WithDefaults()
	if set.Infra != berth.Duration(time.Second) || set.Liveness.Kind != ProbeTCP || set.LiveFailures != 7 || set.Probe.Kind != "" {
		t.Errorf("WithDefaults changed set fields: %+v", set)
	}

	b := Builtin()
	v := b["vllm"].ReadinessFor(map[string]string{"MODEL_NAME": "Qwen/Qwen2-VL-7B-Instruct"})
	if v.Probe.ModelIn != "Qwen/Qwen2-VL-7B-Instruct" || v.Liveness.Path != "/health" || v.Liveness.Status != 200 {
		t.Errorf("vllm readiness = %+v", v)
	}
	if len(v.Markers) != 13 || v.Markers[0] != "vLLM API server version" || len(v.Fatal) != 4 {
		t.Errorf("vllm markers %q, fatal %v", v.Markers, v.Fatal)
	}
	if b["vllm"].Readiness.Probe.ModelIn != "{{MODEL_NAME}}" {
		t.Error("ReadinessFor changed the template")
	}
	if n := b["notebook"].ReadinessFor(nil); n.Probe.Kind != ProbeTCP || n.Liveness.Kind != ProbeTCP || n.Warmup != berth.Duration(5*time.Minute) {
		t.Errorf("notebook readiness = %+v", n)
	}
	portOnly := &Template{Name: "p", Command: berth.Argv{"srv", "{{SERVICE_PORT}}"}, Port: true}
	if r := portOnly.ReadinessFor(nil); r.Probe.Kind != ProbeTCP {
		t.Errorf("a template with a port and no probe gets probe %+v, want tcp", r.Probe)
	}
}

func TestTemplateValidate(t *testing.T) {
	t.Parallel()
	ok := func() *Template {
		return &Template{Name: "svc", Command: berth.Argv{"srv", "--port", "{{SERVICE_PORT}}", "{{A}}"}, Port: true,
			Vars: []Var{{Name: "A", Default: "x"}}, Readiness: Readiness{Probe: Probe{Kind: ProbeHTTP, Path: "/"}}}
	}
	if err := ok().Validate(); err != nil {
		t.Fatalf("valid template: %v", err)
	}
	tests := []struct {
		name   string
		change func(t *Template)
		field  string
	}{
		{"bad name", func(t *Template) { t.Name = "a b" }, "name"},
		{"no command", func(t *Template) { t.Command = nil }, "command"},
		{"bad env name", func(t *Template) { t.Env = map[string]string{"A-B": "1"} }, "env"},
		{"undeclared variable", func(t *Template) { t.Command = append(t.Command, "{{B}}") }, "command"},
		{"undeclared variable in env", func(t *Template) { t.Env = map[string]string{"X": "{{B}}"} }, "env.X"},
		{"duplicate variable", func(t *Template) { t.Vars = append(t.Vars, Var{Name: "A"}) }, "vars.A"},
		{"bad variable name", func(t *Template) { t.Vars = append(t.Vars, Var{Name: "a-b"}) }, "vars[1].name"},
		{"worker variable declared", func(t *Template) { t.Vars = append(t.Vars, Var{Name: "TASK_ID"}) }, "vars.TASK_ID"},
		{"required with default", func(t *Template) { t.Vars[0].Required = true }, "vars.A"},
		{"port unused", func(t *Template) { t.Command = berth.Argv{"srv"} }, "port"},
		{"port used but not declared", func(t *Template) { t.Port = false; t.Readiness = Readiness{} }, "port"},
		{"probe without port", func(t *Template) { t.Port, t.Command = false, berth.Argv{"srv"} }, "readiness.probe.kind"},
		{"bad probe kind", func(t *Template) { t.Readiness.Probe.Kind = "grpc" }, "readiness.probe.kind"},
		{"http probe without path", func(t *Template) { t.Readiness.Probe.Path = "" }, "readiness.probe.path"},
		{"bad status", func(t *Template) { t.Readiness.Probe.Status = 42 }, "readiness.probe.status"},
		{"tcp probe with path", func(t *Template) { t.Readiness.Probe.Kind = ProbeTCP }, "readiness.probe.kind"},
		{"liveness without kind", func(t *Template) { t.Readiness.Liveness.Path = "/health" }, "readiness.liveness.kind"},
		{"model_in with undeclared variable", func(t *Template) { t.Readiness.Probe.ModelIn = "{{M}}" }, "readiness.probe"},
		{"negative budget", func(t *Template) { t.Readiness.Warmup = -1 }, "readiness.warmup"},
		{"negative live failures", func(t *Template) { t.Readiness.LiveFailures = -1 }, "readiness.live_failures"},
		{"empty marker", func(t *Template) { t.Readiness.Markers = []string{"a", " "} }, "readiness.markers[1]"},
		{"bad fatal class", func(t *Template) { t.Readiness.Fatal = []FatalPattern{{"OOM", ClassStall}} }, "readiness.fatal[0].class"},
		{"empty fatal substring", func(t *Template) { t.Readiness.Fatal = []FatalPattern{{"", ClassInfraFatal}} }, "readiness.fatal[0].substring"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tpl := ok()
			tc.change(tpl)
			wantInvalid(t, tpl.Validate(), tc.field)
		})
	}
}

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const goodTemplate = `
description: a plain web server
command: ["python", "-m", "http.server", "{{SERVICE_PORT}}", "--directory", "{{ROOT}}"]
env:
  TOKEN: "{{SECRET:WEB_TOKEN}}"
port: true
vars:
  - name: ROOT
    default: /srv
readiness:
  probe: {kind: http, path: /}
  warmup: 90s
  fatal:
    - {substring: Address already in use, class: infra_fatal}
`

func TestLoadDir(t *testing.T) {
	t.Parallel()
	dir := writeFiles(t, map[string]string{
		"web.yaml":   goodTemplate,
		"other.yml":  "name: shell\ncommand: sleep infinity\n",
		"README.md":  "not a template",
		"notes.json": "{}",
	})
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o700); err != nil {
		t.Fatal(err)
	}
	tpls, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sortedKeys(tpls), []string{"jupyterlab", "notebook", "shell", "vllm", "web"}; !slices.Equal(got, want) {
		t.Fatalf("templates %q, want %q", got, want)
	}
	web := tpls["web"]
	if web.Readiness.Warmup != berth.Duration(90*time.Second) || web.Readiness.Fatal[0].Class != ClassInfraFatal {
		t.Errorf("web readiness = %+v", web.Readiness)
	}
	if want := (berth.Argv{"sh", "-c", "sleep infinity"}); !slices.Equal(tpls["shell"].Command, want) {
		t.Errorf("shell command = %q", tpls["shell"].Command)
	}
	spec := templateSpec("web", map[string]string{"ROOT": "/data"})
	if err := Expand(spec, tpls); err != nil {
		t.Fatal(err)
	}
	if spec.Command[5] != "/data" || spec.Env["TOKEN"] != "{{SECRET:WEB_TOKEN}}" {
		t.Errorf("expanded web: %q %v", spec.Command, spec.Env)
	}

	if tpls, err := LoadDir(""); err != nil || len(tpls) != 3 {
		t.Errorf(`LoadDir("") = %d templates, %v; want the 3 built-ins`, len(tpls), err)
	}
	if _, err := LoadDir(filepath.Join(dir, "missing")); err == nil {
		t.Error("LoadDir of a missing directory: no error")
	}
}

func TestLoadDirErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		files map[string]string
		file  string // named in the error
		field string
		part  string
	}{
		{"bad YAML", map[string]string{"a.yaml": "command: [unclosed\n"}, "a.yaml", "", "not valid YAML"},
		{"empty file", map[string]string{"a.yaml": ""}, "a.yaml", "", "empty"},
		{"unknown field", map[string]string{"a.yaml": "comand: [x]\n"}, "a.yaml", "comand", `unknown field "comand"`},
		{"wrong type", map[string]string{"a.yaml": "command: [x]\nport: yes please\n"}, "a.yaml", "port", "must be true or false"},
		{"bad duration", map[string]string{"a.yaml": "command: [x]\nreadiness: {stall: soon}\n"}, "a.yaml", "readiness.stall", `"soon" is not a duration`},
		{"invalid probe", map[string]string{"a.yaml": "command: [x, '{{SERVICE_PORT}}']\nport: true\nreadiness: {probe: {kind: udp}}\n"},
			"a.yaml", "readiness.probe.kind", "udp"},
		{"undeclared variable", map[string]string{"bad.yml": "command: [x, '{{MODEL}}']\n"}, "bad.yml", "command", "{{MODEL}}"},
		{"shadows a builtin by name", map[string]string{"mine.yaml": "name: vllm\ncommand: [x]\n"}, "mine.yaml", "name", "built-in"},
		{"shadows a builtin by file name", map[string]string{"jupyterlab.yaml": "command: [x]\n"}, "jupyterlab.yaml", "name", "built-in"},
		{"same name twice", map[string]string{"a.yaml": "name: s\ncommand: [x]\n", "b.yaml": "name: s\ncommand: [y]\n"}, "b.yaml", "name", "a.yaml"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := writeFiles(t, tc.files)
			tpls, err := LoadDir(dir)
			if tpls != nil {
				t.Errorf("LoadDir returned templates with an error")
			}
			wantInvalid(t, err, tc.field, filepath.Join(dir, tc.file), tc.part)
		})
	}
}
