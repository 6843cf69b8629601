package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/sim"
)

// Formats of trace and cluster files.
const (
	FormatAuto     = "auto"     // tell from the extension and the CSV header
	FormatAlibaba  = "alibaba"  // Alibaba GPU v2023 (openb_node_list_*.csv, openb_pod_list_*.csv)
	FormatTiresias = "tiresias" // Tiresias (cluster_spec.csv-like and 60_job.csv-like files)
	FormatBerth    = "berth"    // Berth's YAML: workers: [...] and jobs: [...]
)

// Formats lists the formats LoadCluster and LoadWorkload take.
var Formats = []string{FormatAuto, FormatAlibaba, FormatTiresias, FormatBerth}

// traceUser and traceQueue are the user and queue of every job of a trace
// that names neither.
const (
	traceUser  = "trace"
	traceQueue = berth.DefaultQueue
)

// LoadError is a loader's error: the file, the line (1-based; 0 when it is
// about the whole file) and the field at fault.
type LoadError struct {
	File    string
	Line    int
	Field   string
	Message string
}

// Error returns "file:line: field: message".
func (e *LoadError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Field != "" {
		b.WriteString(": " + e.Field)
	}
	return b.String() + ": " + e.Message
}

func loadErr(file string, line int, field, format string, args ...any) *LoadError {
	return &LoadError{File: file, Line: line, Field: field, Message: fmt.Sprintf(format, args...)}
}

// LoadCluster reads a cluster file: an Alibaba node list, a Tiresias
// cluster spec or Berth's YAML. format is one of Formats ("" is auto). It
// returns a *LoadError naming the file, line and field for bad input.
func LoadCluster(path, format string) (*sim.Cluster, error) {
	data, format, err := read(path, format, "cluster")
	if err != nil {
		return nil, err
	}
	var c *sim.Cluster
	switch format {
	case FormatAlibaba:
		c, err = alibabaWorkers(path, data)
	case FormatTiresias:
		c, err = tiresiasCluster(path, data)
	default:
		c, err = berthCluster(path, data)
	}
	if err != nil {
		return nil, err
	}
	if len(c.Workers) == 0 {
		return nil, loadErr(path, 0, "", "the cluster has no workers")
	}
	return c, nil
}

// LoadWorkload reads a workload file: an Alibaba pod list, a Tiresias job
// list or Berth's YAML. The Tiresias format needs the cluster, whose
// largest worker sets how many GPUs a gang member takes. It returns a
// *LoadError naming the file, line and field for bad input.
func LoadWorkload(path, format string, c *sim.Cluster) (*sim.Workload, error) {
	data, format, err := read(path, format, "trace")
	if err != nil {
		return nil, err
	}
	var w *sim.Workload
	switch format {
	case FormatAlibaba:
		w, err = alibabaPods(path, data)
	case FormatTiresias:
		w, err = tiresiasJobs(path, data, c)
	default:
		w, err = berthJobs(path, data)
	}
	if err != nil {
		return nil, err
	}
	if len(w.Jobs) == 0 {
		return nil, loadErr(path, 0, "", "the workload has no jobs that ran (%d records skipped)", w.Skipped)
	}
	return w, nil
}

// read returns the file's bytes and its format, detected when format is
// auto.
func read(path, format, what string) ([]byte, string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, "", loadErr(path, 0, "", "cannot read the %s file: %v", what, err)
	}
	switch format {
	case "", FormatAuto:
		format, err = Detect(path, data)
		return data, format, err
	case FormatAlibaba, FormatTiresias, FormatBerth:
		return data, format, nil
	}
	return nil, "", fmt.Errorf("unknown format %q (one of %s)", format, strings.Join(Formats, ", "))
}

// Detect tells a file's format: YAML or JSON by extension is Berth's; a CSV
// by its header (cpu_milli: Alibaba; num_switch or duration: Tiresias). It
// returns a *LoadError when it cannot tell.
func Detect(path string, data []byte) (string, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml", ".json":
		return FormatBerth, nil
	}
	header, _, _ := strings.Cut(string(data), "\n")
	cols := map[string]bool{}
	for _, c := range strings.Split(strings.TrimSpace(header), ",") {
		cols[strings.TrimSpace(c)] = true
	}
	switch {
	case cols["cpu_milli"]:
		return FormatAlibaba, nil
	case cols["num_switch"], cols["duration"]:
		return FormatTiresias, nil
	case strings.Contains(header, ":"):
		return FormatBerth, nil // YAML without the extension
	}
	return "", loadErr(path, 1, "", "cannot tell the format from the header %q; name it with --format", berth.Clip(header, 60))
}

// csvFile reads a CSV file with a header row, giving each field by column
// name with the line it is on.
type csvFile struct {
	path string
	r    *csv.Reader
	cols map[string]int
	rec  []string
	line int
}

// openCSV reads the header and checks it has every required column.
func openCSV(path string, data []byte, required ...string) (*csvFile, error) {
	r := csv.NewReader(strings.NewReader(string(data)))
	r.FieldsPerRecord = -1
	r.ReuseRecord = true
	header, err := r.Read()
	if err != nil {
		return nil, csvErr(path, err)
	}
	f := &csvFile{path: path, r: r, cols: map[string]int{}, line: 1}
	for i, c := range header {
		f.cols[strings.TrimSpace(strings.TrimPrefix(c, "\ufeff"))] = i
	}
	for _, c := range required {
		if _, ok := f.cols[c]; !ok {
			return nil, loadErr(path, 1, c, "the header has no column %q (it has %s)", c, strings.Join(header, ","))
		}
	}
	return f, nil
}

func csvErr(path string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return loadErr(path, pe.Line, fmt.Sprintf("column %d", pe.Column), "%v", pe.Err)
	}
	if err == io.EOF {
		return loadErr(path, 0, "", "the file is empty")
	}
	return loadErr(path, 0, "", "%v", err)
}

// next reads the next record; it returns false at the end of the file.
func (f *csvFile) next() (bool, error) {
	rec, err := f.r.Read()
	if err == io.EOF {
		return false, nil
	}
	if err != nil {
		return false, csvErr(f.path, err)
	}
	f.rec = rec
	f.line, _ = f.r.FieldPos(0)
	return true, nil
}

// has reports whether the file has column name.
func (f *csvFile) has(name string) bool {
	_, ok := f.cols[name]
	return ok
}

// str returns column name of the record, trimmed; "" when the record is
// short.
func (f *csvFile) str(name string) string {
	i, ok := f.cols[name]
	if !ok || i >= len(f.rec) {
		return ""
	}
	return strings.TrimSpace(f.rec[i])
}

func (f *csvFile) err(field, format string, args ...any) error {
	return loadErr(f.path, f.line, field, format, args...)
}

// number returns column name as a number in [lo, hi].
func (f *csvFile) number(name string, lo, hi float64) (float64, error) {
	s := f.str(name)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) {
		return 0, f.err(name, "%q is not a number", s)
	}
	if v < lo || v > hi {
		return 0, f.err(name, "%s is out of range [%g, %g]", s, lo, hi)
	}
	return v, nil
}

// integer returns column name as a whole number in [lo, hi].
func (f *csvFile) integer(name string, lo, hi int) (int, error) {
	v, err := f.number(name, float64(lo), float64(hi))
	if err != nil {
		return 0, err
	}
	if v != math.Trunc(v) {
		return 0, f.err(name, "%s is not a whole number", f.str(name))
	}
	return int(v), nil
}

// seconds returns column name, a number of seconds, as a duration.
func (f *csvFile) seconds(name string) (time.Duration, error) {
	v, err := f.number(name, 0, float64(math.MaxInt64/int64(time.Second)))
	if err != nil {
		return 0, err
	}
	return time.Duration(v * float64(time.Second)), nil
}

// maxCPUs bounds the CPUs of a worker or job.
const maxCPUs = 1 << 20

// alibabaWorkers reads openb_node_list_*.csv: sn, cpu_milli, memory_mib, gpu,
// model. GPU memory is not in the trace and is left 0.
func alibabaWorkers(path string, data []byte) (*sim.Cluster, error) {
	f, err := openCSV(path, data, "sn", "cpu_milli", "memory_mib", "gpu", "model")
	if err != nil {
		return nil, err
	}
	c := &sim.Cluster{}
	for {
		ok, err := f.next()
		if err != nil || !ok {
			return c, err
		}
		w := sim.Worker{ID: f.str("sn")}
		if w.ID == "" {
			return nil, f.err("sn", "must not be empty")
		}
		milli, err := f.number("cpu_milli", 0, maxCPUs*1000)
		if err != nil {
			return nil, err
		}
		mib, err := f.number("memory_mib", 0, 1<<40)
		if err != nil {
			return nil, err
		}
		gpus, err := f.integer("gpu", 0, berth.MaxGPUsPerWorker)
		if err != nil {
			return nil, err
		}
		model := f.str("model")
		if gpus > 0 && (model == "" || model == "nan") {
			return nil, f.err("model", "a node with GPUs needs a model")
		}
		w.CPUs, w.Memory = milli/1000, berth.Bytes(mib*(1<<20))
		for g := range gpus {
			w.GPUs = append(w.GPUs, berth.GPU{Index: g, Model: model})
		}
		c.Workers = append(c.Workers, w)
	}
}

// alibabaPods reads openb_pod_list_*.csv. A pod is submitted at
// creation_time and runs deletion_time − scheduled_time seconds; pods that
// never ran (no scheduled_time) or ran no time are skipped. A pod asking
// for part of one GPU (gpu_milli < 1000) asks for that fraction
// (podResources). Pods have no user or priority: all are the one user
// "trace", priority 100, queue default.
func alibabaPods(path string, data []byte) (*sim.Workload, error) {
	f, err := openCSV(path, data, "name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli",
		"creation_time", "deletion_time", "scheduled_time")
	if err != nil {
		return nil, err
	}
	w := &sim.Workload{}
	for {
		ok, err := f.next()
		if err != nil || !ok {
			return w, err
		}
		j, ran, err := alibabaPod(f)
		if err != nil {
			return nil, err
		}
		if !ran {
			w.Skipped++
			continue
		}
		w.Jobs = append(w.Jobs, j)
	}
}

// alibabaPod converts one pod record and reports whether it ran.
func alibabaPod(f *csvFile) (sim.Job, bool, error) {
	j := sim.Job{ID: f.str("name"), User: traceUser, Queue: traceQueue, Priority: berth.DefaultPriority, Nodes: 1}
	if j.ID == "" {
		return j, false, f.err("name", "must not be empty")
	}
	if f.str("scheduled_time") == "" {
		return j, false, nil
	}
	var err error
	if j.Submit, err = f.seconds("creation_time"); err != nil {
		return j, false, err
	}
	deleted, err := f.seconds("deletion_time")
	if err != nil {
		return j, false, err
	}
	scheduled, err := f.seconds("scheduled_time")
	if err != nil {
		return j, false, err
	}
	if j.Duration = deleted - scheduled; j.Duration <= 0 {
		return j, false, nil
	}
	if j.Resources, err = podResources(f); err != nil {
		return j, false, err
	}
	return j, true, nil
}

// podResources reads a pod's request: cpu_milli, memory_mib, num_gpu,
// gpu_milli and gpu_spec. A pod asking for part of one GPU (num_gpu 1,
// gpu_milli below 1000) asks for that fraction; a gpu_spec naming one
// model becomes the GPU type, one naming several (V100M16|V100M32) is
// ignored.
func podResources(f *csvFile) (berth.Resources, error) {
	milli, err := f.number("cpu_milli", 0, maxCPUs*1000)
	if err != nil {
		return berth.Resources{}, err
	}
	mib, err := f.number("memory_mib", 0, 1<<40)
	if err != nil {
		return berth.Resources{}, err
	}
	gpus, err := f.integer("num_gpu", 0, berth.MaxGPUsPerWorker)
	if err != nil {
		return berth.Resources{}, err
	}
	gpuMilli, err := f.number("gpu_milli", 0, 1000*berth.MaxGPUsPerWorker)
	if err != nil {
		return berth.Resources{}, err
	}
	r := berth.Resources{GPUs: gpus, CPUs: milli / 1000, Memory: berth.Bytes(mib * (1 << 20))}
	if gpus <= 1 && gpuMilli > 0 && gpuMilli < berth.WholeGPU {
		r.GPUs, r.GPUMilli = 0, int(math.Round(gpuMilli)) // a fraction of one GPU
	}
	if spec := f.str("gpu_spec"); r.WantsGPUs() && spec != "" && spec != "nan" && !strings.Contains(spec, "|") {
		r.GPUType = spec
	}
	return r, nil
}

// LoadTasks reads the tasks a fill experiment draws from (sim.Fill): an
// Alibaba pod list, every record whether it ran or not and with or
// without times (only name, cpu_milli, memory_mib, num_gpu and gpu_milli
// are required), or Berth's YAML (jobs:). It returns a *LoadError naming
// the file, line and field for bad input.
func LoadTasks(path, format string) ([]sim.Job, error) {
	data, format, err := read(path, format, "trace")
	if err != nil {
		return nil, err
	}
	var jobs []sim.Job
	switch format {
	case FormatAlibaba:
		jobs, err = alibabaTasks(path, data)
	case FormatBerth:
		var w *sim.Workload
		if w, err = berthJobs(path, data); w != nil {
			jobs = w.Jobs
		}
	default:
		return nil, loadErr(path, 0, "", "a fill experiment takes an Alibaba pod list or Berth's YAML, not the %s format", format)
	}
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, loadErr(path, 0, "", "the file has no tasks")
	}
	return jobs, nil
}

// alibabaTasks reads every record of an Alibaba pod list as a task that
// runs for a second.
func alibabaTasks(path string, data []byte) ([]sim.Job, error) {
	f, err := openCSV(path, data, "name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
	if err != nil {
		return nil, err
	}
	var jobs []sim.Job
	for {
		ok, err := f.next()
		if err != nil || !ok {
			return jobs, err
		}
		j := sim.Job{ID: f.str("name"), User: traceUser, Queue: traceQueue, Priority: berth.DefaultPriority,
			Nodes: 1, Duration: time.Second}
		if j.ID == "" {
			return nil, f.err("name", "must not be empty")
		}
		if j.Resources, err = podResources(f); err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
}

// tiresiasCluster reads a Tiresias cluster spec (cluster_spec.csv,
// n32g4.csv): num_switch × num_node_p_switch workers named s<switch>-n<node>,
// each with num_gpu_p_node GPUs (model "GPU", memory unknown),
// num_cpu_p_node CPUs and mem_p_node GiB of memory. Every row adds its
// switches.
func tiresiasCluster(path string, data []byte) (*sim.Cluster, error) {
	f, err := openCSV(path, data, "num_switch", "num_node_p_switch", "num_gpu_p_node", "num_cpu_p_node", "mem_p_node")
	if err != nil {
		return nil, err
	}
	c := &sim.Cluster{}
	sw := 0 // switches so far
	for {
		ok, err := f.next()
		if err != nil || !ok {
			return c, err
		}
		switches, err := f.integer("num_switch", 1, 1<<10)
		if err != nil {
			return nil, err
		}
		perSwitch, err := f.integer("num_node_p_switch", 1, 1<<14)
		if err != nil {
			return nil, err
		}
		gpus, err := f.integer("num_gpu_p_node", 0, berth.MaxGPUsPerWorker)
		if err != nil {
			return nil, err
		}
		cpus, err := f.number("num_cpu_p_node", 0, maxCPUs)
		if err != nil {
			return nil, err
		}
		mem, err := f.number("mem_p_node", 0, 1<<30)
		if err != nil {
			return nil, err
		}
		for range switches {
			for n := range perSwitch {
				w := sim.Worker{ID: fmt.Sprintf("s%d-n%03d", sw, n), CPUs: cpus, Memory: berth.Bytes(mem * (1 << 30))}
				for g := range gpus {
					w.GPUs = append(w.GPUs, berth.GPU{Index: g, Model: "GPU"})
				}
				c.Workers = append(c.Workers, w)
			}
			sw++
		}
	}
}

// tiresiasJobs reads a Tiresias job list (60_job.csv): job_id, num_gpu,
// submit_time and duration in seconds. Only duration is required: a file
// of durations alone (yarn-gput1000.csv, Tiresias's duration distribution)
// gives one-GPU jobs all submitted at 0, numbered from 0. A job asking for
// more GPUs than the cluster's largest worker has becomes a gang of
// ceil(num_gpu ÷ that count) workers taken whole. Jobs ask for no CPUs or
// memory; all are user "trace", priority 100, queue default.
func tiresiasJobs(path string, data []byte, c *sim.Cluster) (*sim.Workload, error) {
	f, err := openCSV(path, data, "duration")
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, loadErr(path, 0, "", "a Tiresias job list needs the cluster it runs on")
	}
	perWorker := 0
	for _, w := range c.Workers {
		perWorker = max(perWorker, len(w.GPUs))
	}
	w := &sim.Workload{}
	for {
		ok, err := f.next()
		if err != nil || !ok {
			return w, err
		}
		j, err := tiresiasJob(f, len(w.Jobs), perWorker)
		if err != nil {
			return nil, err
		}
		w.Jobs = append(w.Jobs, j)
	}
}

func tiresiasJob(f *csvFile, n, perWorker int) (sim.Job, error) {
	j := sim.Job{ID: strconv.Itoa(n), User: traceUser, Queue: traceQueue, Priority: berth.DefaultPriority, Nodes: 1}
	if f.has("job_id") {
		if j.ID = f.str("job_id"); j.ID == "" {
			return j, f.err("job_id", "must not be empty")
		}
	}
	var err error
	if j.Duration, err = f.seconds("duration"); err != nil {
		return j, err
	}
	if j.Duration <= 0 {
		return j, f.err("duration", "must be positive")
	}
	if f.has("submit_time") {
		if j.Submit, err = f.seconds("submit_time"); err != nil {
			return j, err
		}
	}
	j.Resources.GPUs = 1
	if f.has("num_gpu") {
		if j.Resources.GPUs, err = f.integer("num_gpu", 0, berth.MaxNodes*berth.MaxGPUsPerWorker); err != nil {
			return j, err
		}
	}
	if perWorker > 0 && j.Resources.GPUs > perWorker {
		j.Nodes = (j.Resources.GPUs + perWorker - 1) / perWorker
		j.Resources.GPUs = perWorker
	}
	if j.Nodes > berth.MaxNodes {
		return j, f.err("num_gpu", "%d GPUs need %d workers; at most %d", j.Resources.GPUs*j.Nodes, j.Nodes, berth.MaxNodes)
	}
	return j, nil
}
