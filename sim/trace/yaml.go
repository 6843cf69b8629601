package trace

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/sim"
	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// Berth's own format is YAML with a list of worker groups, a list of job
// groups, or both (one file may serve as cluster and trace):
//
//	workers:
//	  - {name: h100, count: 4, gpus: 8xH100:80GiB, cpus: 64, memory: 512GiB}
//	jobs:
//	  - {id: gang, user: alice, submit: 0s, nodes: 2, gpus: 8, duration: 1h}
//	  - {id: small, user: bob, count: 100, every: 30s, gpus: 1, duration: 10m,
//	     priority: 50, max_runtime: 20m, preemptible: true}
//
// Worker fields: name (default w<entry>; with count > 1 the workers are
// name-0, name-1, …), count (1), gpus (berth.ParseGPUSpec: 8xH100:80GiB,
// or 0), cpus, memory (berth.ParseBytes: 512GiB).
//
// Job fields: id (default j<entry>; with count > 1 the jobs are id-0,
// id-1, …), user ("user"), queue ("default"), priority (100), submit (0s),
// count (1), every (0s: the gap between the submissions of the copies),
// nodes (1), gpus (whole, or a fraction of one GPU: 0.5), gpu_type,
// gpu_memory, cpus, memory (per node),
// duration (required), max_runtime (none), preemptible (false). Durations
// are Go durations (90s, 1h30m) or numbers of seconds.

// yamlField is one key: value of a YAML mapping.
type yamlField struct {
	key   string
	value ast.Node
	line  int
}

// yamlDoc parses data and returns the top-level mapping's fields.
func yamlDoc(path string, data []byte) ([]yamlField, error) {
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		var ye yaml.Error
		if errors.As(err, &ye) && ye.GetToken() != nil {
			return nil, loadErr(path, ye.GetToken().Position.Line, "", "not valid YAML: %s", ye.GetMessage())
		}
		return nil, loadErr(path, 0, "", "not valid YAML: %v", err)
	}
	if len(f.Docs) == 0 || f.Docs[0].Body == nil {
		return nil, loadErr(path, 0, "", "the file is empty")
	}
	return yamlMapping(path, "", f.Docs[0].Body)
}

// yamlMapping returns the fields of a mapping node; field names the
// mapping in errors.
func yamlMapping(path, field string, n ast.Node) ([]yamlField, error) {
	var pairs []*ast.MappingValueNode
	switch m := n.(type) {
	case *ast.MappingNode:
		pairs = m.Values
	case *ast.MappingValueNode:
		pairs = []*ast.MappingValueNode{m}
	default:
		return nil, loadErr(path, line(n), field, "must be a mapping of key: value")
	}
	out := make([]yamlField, 0, len(pairs))
	seen := map[string]bool{}
	for _, p := range pairs {
		k := yamlField{key: strings.TrimSpace(p.Key.String()), value: p.Value, line: line(p.Key)}
		if seen[k.key] {
			return nil, loadErr(path, k.line, join(field, k.key), "appears twice")
		}
		seen[k.key] = true
		out = append(out, k)
	}
	return out, nil
}

// yamlList returns the items of a sequence node.
func yamlList(path, field string, n ast.Node) ([]ast.Node, error) {
	s, ok := n.(*ast.SequenceNode)
	if !ok {
		return nil, loadErr(path, line(n), field, "must be a list")
	}
	return s.Values, nil
}

func line(n ast.Node) int {
	if n == nil || n.GetToken() == nil {
		return 0
	}
	return n.GetToken().Position.Line
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// section returns the list under key of the top-level mapping, and false
// when there is none. It rejects keys other than workers and jobs.
func section(path string, data []byte, key string) ([]ast.Node, bool, error) {
	fields, err := yamlDoc(path, data)
	if err != nil {
		return nil, false, err
	}
	var list []ast.Node
	found := false
	for _, f := range fields {
		switch f.key {
		case "workers", "jobs":
		default:
			return nil, false, loadErr(path, f.line, f.key, "unknown field (want workers or jobs)")
		}
		if f.key == key {
			if list, err = yamlList(path, key, f.value); err != nil {
				return nil, false, err
			}
			found = true
		}
	}
	return list, found, nil
}

// scalar reads one field's value as text.
type scalar struct {
	path, field string
	line        int
	text        string
}

func newScalar(path, prefix string, f yamlField) (scalar, error) {
	s := scalar{path: path, field: join(prefix, f.key), line: line(f.value)}
	if s.line == 0 {
		s.line = f.line
	}
	v, ok := f.value.(ast.ScalarNode)
	if !ok || f.value.Type() == ast.NullType {
		return s, s.err("must be a single value")
	}
	s.text = strings.TrimSpace(fmt.Sprint(v.GetValue()))
	return s, nil
}

func (s scalar) err(format string, args ...any) error {
	return loadErr(s.path, s.line, s.field, format, args...)
}

func (s scalar) name() (string, error) {
	if s.text == "" {
		return "", s.err("must not be empty")
	}
	return s.text, nil
}

func (s scalar) integer(lo, hi int) (int, error) {
	v, err := strconv.Atoi(s.text)
	if err != nil {
		return 0, s.err("%q is not a whole number", s.text)
	}
	if v < lo || v > hi {
		return 0, s.err("%d is out of range [%d, %d]", v, lo, hi)
	}
	return v, nil
}

func (s scalar) number(lo, hi float64) (float64, error) {
	v, err := strconv.ParseFloat(s.text, 64)
	if err != nil || math.IsNaN(v) {
		return 0, s.err("%q is not a number", s.text)
	}
	if v < lo || v > hi {
		return 0, s.err("%g is out of range [%g, %g]", v, lo, hi)
	}
	return v, nil
}

func (s scalar) bytes() (berth.Bytes, error) {
	b, err := berth.ParseBytes(s.text)
	if err != nil {
		return 0, s.err("%v", err)
	}
	return b, nil
}

// duration accepts a Go duration or a number of seconds, not negative.
func (s scalar) duration() (time.Duration, error) {
	d, err := time.ParseDuration(s.text)
	if err != nil {
		secs, ferr := strconv.ParseFloat(s.text, 64)
		if ferr != nil || math.IsNaN(secs) || secs > float64(math.MaxInt64/int64(time.Second)) {
			return 0, s.err("%q is not a duration such as 90s or 1h30m", s.text)
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d < 0 {
		return 0, s.err("must not be negative")
	}
	return d, nil
}

func (s scalar) boolean() (bool, error) {
	v, err := strconv.ParseBool(s.text)
	if err != nil {
		return false, s.err("%q is not true or false", s.text)
	}
	return v, nil
}

// maxCount bounds the copies one entry makes.
const maxCount = 1_000_000

// berthCluster reads the workers section of Berth's YAML format.
func berthCluster(path string, data []byte) (*sim.Cluster, error) {
	items, found, err := section(path, data, "workers")
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, loadErr(path, 1, "workers", "the file has no workers list")
	}
	c := &sim.Cluster{}
	ids := map[string]int{} // id → line
	for i, item := range items {
		ws, err := berthWorkers(path, i, item)
		if err != nil {
			return nil, err
		}
		for _, w := range ws {
			if l, dup := ids[w.ID]; dup {
				return nil, loadErr(path, line(item), fmt.Sprintf("workers[%d].name", i), "worker %s is also made on line %d", w.ID, l)
			}
			ids[w.ID] = line(item)
			c.Workers = append(c.Workers, w)
		}
	}
	return c, nil
}

// berthWorkers reads one entry of the workers list.
func berthWorkers(path string, i int, item ast.Node) ([]sim.Worker, error) {
	prefix := fmt.Sprintf("workers[%d]", i)
	fields, err := yamlMapping(path, prefix, item)
	if err != nil {
		return nil, err
	}
	name, count := fmt.Sprintf("w%d", i), 1
	var tmpl sim.Worker
	for _, f := range fields {
		s, err := newScalar(path, prefix, f)
		if err != nil {
			return nil, err
		}
		switch f.key {
		case "name":
			name, err = s.name()
		case "count":
			count, err = s.integer(1, maxCount)
		case "gpus":
			tmpl.GPUs, err = berth.ParseGPUSpec(s.text)
			if err != nil {
				err = s.err("%v", err)
			}
		case "cpus":
			tmpl.CPUs, err = s.number(0, maxCPUs)
		case "memory":
			tmpl.Memory, err = s.bytes()
		default:
			err = loadErr(path, f.line, join(prefix, f.key), "unknown field (want name, count, gpus, cpus or memory)")
		}
		if err != nil {
			return nil, err
		}
	}
	ws := make([]sim.Worker, count)
	width := len(strconv.Itoa(count - 1))
	for k := range ws {
		ws[k] = tmpl
		ws[k].GPUs = append([]berth.GPU(nil), tmpl.GPUs...)
		ws[k].ID = name
		if count > 1 {
			ws[k].ID = fmt.Sprintf("%s-%0*d", name, width, k)
		}
	}
	return ws, nil
}

// berthJobs reads the jobs section of Berth's YAML format.
func berthJobs(path string, data []byte) (*sim.Workload, error) {
	items, found, err := section(path, data, "jobs")
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, loadErr(path, 1, "jobs", "the file has no jobs list")
	}
	w := &sim.Workload{}
	ids := map[string]int{}
	for i, item := range items {
		js, err := berthJobEntry(path, i, item)
		if err != nil {
			return nil, err
		}
		for _, j := range js {
			if l, dup := ids[j.ID]; dup {
				return nil, loadErr(path, line(item), fmt.Sprintf("jobs[%d].id", i), "job %s is also made on line %d", j.ID, l)
			}
			ids[j.ID] = line(item)
			w.Jobs = append(w.Jobs, j)
		}
	}
	return w, nil
}

// berthJobEntry reads one entry of the jobs list: count copies of a job.
func berthJobEntry(path string, i int, item ast.Node) ([]sim.Job, error) {
	prefix := fmt.Sprintf("jobs[%d]", i)
	fields, err := yamlMapping(path, prefix, item)
	if err != nil {
		return nil, err
	}
	j := sim.Job{ID: fmt.Sprintf("j%d", i), User: "user", Queue: berth.DefaultQueue, Priority: berth.DefaultPriority, Nodes: 1}
	count, every, hasDuration := 1, time.Duration(0), false
	for _, f := range fields {
		s, err := newScalar(path, prefix, f)
		if err != nil {
			return nil, err
		}
		switch f.key {
		case "count":
			count, err = s.integer(1, maxCount)
		case "every":
			every, err = s.duration()
		case "duration":
			hasDuration = true
			if j.Duration, err = s.duration(); err == nil && j.Duration == 0 {
				err = s.err("must be positive")
			}
		default:
			err = setJobField(&j, f.key, s)
		}
		if err != nil {
			return nil, err
		}
	}
	if !hasDuration {
		return nil, loadErr(path, line(item), prefix+".duration", "is required")
	}
	js := make([]sim.Job, count)
	for k := range js {
		js[k] = j
		if count > 1 {
			js[k].ID = fmt.Sprintf("%s-%d", j.ID, k)
			js[k].Submit = j.Submit + time.Duration(k)*every
		}
	}
	return js, nil
}

// setJobField sets the job field key from s.
func setJobField(j *sim.Job, key string, s scalar) error {
	var err error
	r := &j.Resources
	switch key {
	case "id":
		j.ID, err = s.name()
	case "user":
		j.User, err = s.name()
	case "queue":
		j.Queue, err = s.name()
	case "gpu_type":
		r.GPUType, err = s.name()
	case "priority":
		j.Priority, err = s.integer(0, berth.MaxPriority)
	case "submit":
		j.Submit, err = s.duration()
	case "max_runtime":
		j.MaxRuntime, err = s.duration()
	case "nodes":
		j.Nodes, err = s.integer(1, berth.MaxNodes)
	case "gpus": // whole GPUs, or a fraction of one (0.5)
		var perr error
		if r.GPUs, r.GPUMilli, perr = berth.ParseGPUs(s.text); perr != nil {
			err = s.err("%v", perr)
		}
	case "gpu_memory":
		r.GPUMemory, err = s.bytes()
	case "cpus":
		r.CPUs, err = s.number(0, maxCPUs)
	case "memory":
		r.Memory, err = s.bytes()
	case "preemptible":
		j.Preemptible, err = s.boolean()
	default:
		return s.err("unknown field (want id, user, queue, priority, submit, count, every, nodes, gpus, gpu_type, " +
			"gpu_memory, cpus, memory, duration, max_runtime or preemptible)")
	}
	return err
}
