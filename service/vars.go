package service

import (
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/berth-dev/berth"
)

var (
	// varRE matches a variable reference; {{SECRET:NAME}} is not one.
	varRE     = regexp.MustCompile(`\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}`)
	varNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// workerVars are the system variables only the worker knows: a job or a
// template cannot set them.
var workerVars = map[string]bool{
	"SERVICE_PORT": true, "WORKER_ID": true, "TASK_ID": true, "GPU_COUNT": true, "GPU_DEVICES": true,
}

// systemVars are the variables Render fills on the worker. MODEL_NAME,
// MODEL_CACHE and WORKSPACE may also be given at submit, which wins.
var systemVars = map[string]bool{
	"SERVICE_PORT": true, "WORKER_ID": true, "TASK_ID": true, "GPU_COUNT": true, "GPU_DEVICES": true,
	"GPU_MEMORY_UTILIZATION": true, "MODEL_NAME": true, "MODEL_CACHE": true, "WORKSPACE": true,
}

const systemVarList = "SERVICE_PORT, WORKER_ID, TASK_ID, MODEL_NAME, GPU_COUNT, GPU_DEVICES, GPU_MEMORY_UTILIZATION, MODEL_CACHE, WORKSPACE"

// Runtime holds the values of the system variables of one task, known on the
// worker when it starts.
type Runtime struct {
	ServicePort int    // {{SERVICE_PORT}}; 0 (none allocated) renders as ""
	WorkerID    string // {{WORKER_ID}}
	TaskID      string // {{TASK_ID}}
	ModelName   string // {{MODEL_NAME}}: the job's model
	GPUCount    int    // {{GPU_COUNT}}
	GPUDevices  string // {{GPU_DEVICES}}: comma-separated, as in CUDA_VISIBLE_DEVICES
	// GPUMilli is the task's share of its one GPU for a fraction
	// (milli-GPUs), 0 for whole GPUs: {{GPU_MEMORY_UTILIZATION}} is
	// MemoryUtilization of it.
	GPUMilli   int
	ModelCache string // {{MODEL_CACHE}}
	Workspace  string // {{WORKSPACE}}
}

// Values returns every system variable's name (without braces) and value.
// It never fails.
func (rt Runtime) Values() map[string]string {
	port := ""
	if rt.ServicePort > 0 {
		port = strconv.Itoa(rt.ServicePort)
	}
	return map[string]string{
		"SERVICE_PORT":           port,
		"WORKER_ID":              rt.WorkerID,
		"TASK_ID":                rt.TaskID,
		"MODEL_NAME":             rt.ModelName,
		"GPU_COUNT":              strconv.Itoa(rt.GPUCount),
		"GPU_DEVICES":            rt.GPUDevices,
		"GPU_MEMORY_UTILIZATION": MemoryUtilization(rt.GPUMilli),
		"MODEL_CACHE":            rt.ModelCache,
		"WORKSPACE":              rt.Workspace,
	}
}

// Render substitutes the system variables in s, in one pass (a value holding
// a reference is not expanded again), and leaves {{SECRET:NAME}} and any
// other text verbatim. The agent calls it on each argument and env value
// when it starts a task. It never fails.
func Render(s string, rt Runtime) string {
	if !strings.Contains(s, "{{") {
		return s
	}
	return substitute(s, rt.Values())
}

// NeedsPort reports whether spec's command or env uses {{SERVICE_PORT}}, so
// that the worker must allocate a port for it. It never fails.
func NeedsPort(spec *berth.JobSpec) bool { return usesPort(spec.Command, spec.Env) }

// CheckVars returns an ECodeInvalid *berth.Error with field "vars" when
// spec's command or env holds a {{NAME}} that is not a system variable, else
// nil. {{SECRET:NAME}} references and text that is not a well-formed
// reference are allowed. Expand calls it; call it directly only on a spec
// whose user variables have been substituted (or that has none).
func CheckVars(spec *berth.JobSpec) error { return checkRemaining(spec.Command, spec.Env, nil) }

// Expand prepares spec at submit. When spec.Template is set it looks the
// template up in tpls, takes the template's command unless spec has its
// own, merges spec.Env over the template's env, and sets spec.Kind to
// "service". With or without a template it substitutes the user variables
// (spec.Vars over the template's defaults) in command and env, then checks
// that only system variables and {{SECRET:NAME}} references remain.
//
// It returns an ECodeInvalid *berth.Error, and leaves spec unchanged, for an
// unknown template (field "template"), a var with a bad name or a system
// variable only the worker sets (field "vars" or "vars.NAME"), a var neither
// declared by the template nor used (field "vars.NAME"), a required variable
// missing (field "vars.NAME"), or an unknown variable in command or env
// (field "vars"). Call it once per submission: its result holds no user
// variables, so a var used only by the spec's own command no longer is.
func Expand(spec *berth.JobSpec, tpls map[string]*Template) error {
	var tpl *Template
	if spec.Template != "" {
		tpl = tpls[spec.Template]
		if tpl == nil {
			return berth.Invalidf("template", "unknown template %q (have: %s)", spec.Template, strings.Join(sortedKeys(tpls), ", "))
		}
	}
	cmd, env := spec.Command, spec.Env
	if tpl != nil {
		if len(cmd) == 0 {
			cmd = tpl.Command
		}
		env = make(map[string]string, len(tpl.Env)+len(spec.Env))
		maps.Copy(env, tpl.Env)
		maps.Copy(env, spec.Env)
	}
	for _, k := range sortedKeys(spec.Vars) {
		switch {
		case !varNameRE.MatchString(k):
			return berth.Invalidf("vars", "%q is not a valid variable name (letters, digits and underscores, not starting with a digit)", k)
		case workerVars[k]:
			return berth.Invalidf("vars."+k, "{{%s}} is set on the worker at run time and cannot be given", k)
		case tpl != nil && tpl.lookup(k) != nil:
		case !references(cmd, env, k):
			if tpl != nil {
				return berth.Invalidf("vars."+k, "is not declared by template %s (it declares %s) and not used in command or env", tpl.Name, tpl.declared())
			}
			return berth.Invalidf("vars."+k, "is not used in command or env")
		}
	}
	values := spec.Vars
	lists := map[string]bool{}
	if tpl != nil {
		for _, v := range tpl.Vars {
			if v.Required && spec.Vars[v.Name] == "" {
				return berth.Invalidf("vars."+v.Name, "required by template %s", tpl.Name)
			}
			lists[v.Name] = v.Args
		}
		values = tpl.values(spec.Vars)
	}
	newCmd := make(berth.Argv, 0, len(cmd))
	for _, a := range cmd {
		if m := varRE.FindStringSubmatch(a); m != nil && m[0] == a && lists[m[1]] {
			newCmd = append(newCmd, strings.Fields(values[m[1]])...)
			continue
		}
		newCmd = append(newCmd, substitute(a, values))
	}
	var newEnv map[string]string
	if env != nil {
		newEnv = make(map[string]string, len(env))
		for k, v := range env {
			newEnv[k] = substitute(v, values)
		}
	}
	if err := checkRemaining(newCmd, newEnv, tpl); err != nil {
		return err
	}
	spec.Command, spec.Env = newCmd, newEnv
	if tpl != nil {
		spec.Kind = berth.KindService
	}
	return nil
}

// checkRemaining fails on the first reference in cmd or env that is not a
// system variable; tpl, when set, is named in the message.
func checkRemaining(cmd berth.Argv, env map[string]string, tpl *Template) error {
	return checkRefs(cmd, env, func(name string) bool { return systemVars[name] }, func(ref, where string) error {
		if tpl != nil {
			return berth.Invalidf("vars", "unknown variable %s in %s: the template %s declares %s; give it in vars or use a system variable (%s)", ref, where, tpl.Name, tpl.declared(), systemVarList)
		}
		return berth.Invalidf("vars", "unknown variable %s in %s: give it in vars or use a system variable (%s)", ref, where, systemVarList)
	})
}

// checkRefs calls fail for the first reference in cmd, then env (by key),
// whose name is not known; where is "command" or "env.KEY".
func checkRefs(cmd berth.Argv, env map[string]string, known func(string) bool, fail func(ref, where string) error) error {
	for _, a := range cmd {
		for _, name := range refs(a) {
			if !known(name) {
				return fail("{{"+name+"}}", "command")
			}
		}
	}
	for _, k := range sortedKeys(env) {
		for _, name := range refs(env[k]) {
			if !known(name) {
				return fail("{{"+name+"}}", "env."+k)
			}
		}
	}
	return nil
}

// refs returns the names of the variables s references, in order.
func refs(s string) []string {
	if !strings.Contains(s, "{{") {
		return nil
	}
	var names []string
	for _, m := range varRE.FindAllStringSubmatch(s, -1) {
		names = append(names, m[1])
	}
	return names
}

func references(cmd berth.Argv, env map[string]string, name string) bool {
	ref := "{{" + name + "}}"
	for _, v := range env {
		if strings.Contains(v, ref) {
			return true
		}
	}
	return slices.ContainsFunc(cmd, func(a string) bool { return strings.Contains(a, ref) })
}

func usesPort(cmd berth.Argv, env map[string]string) bool {
	return references(cmd, env, "SERVICE_PORT")
}

// substitute replaces each {{NAME}} with values[NAME] in one pass, leaving
// references to names not in values verbatim.
func substitute(s string, values map[string]string) string {
	if !strings.Contains(s, "{{") {
		return s
	}
	return varRE.ReplaceAllStringFunc(s, func(ref string) string {
		if v, ok := values[ref[2:len(ref)-2]]; ok {
			return v
		}
		return ref
	})
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// MemoryUtilization is {{GPU_MEMORY_UTILIZATION}}, the share of its GPUs'
// memory a task may take (vLLM's --gpu-memory-utilization): 0.9 of a
// whole GPU, as vLLM's default, and 0.9 of a fraction's share of its one
// GPU ("0.45" for 500 milli), leaving room for the CUDA context beside
// the other fractions.
func MemoryUtilization(milli int) string {
	if milli <= 0 {
		milli = berth.WholeGPU
	}
	return strconv.FormatFloat(math.Round(float64(milli)*0.9)/berth.WholeGPU, 'f', -1, 64)
}
