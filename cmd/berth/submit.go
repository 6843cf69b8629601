package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
)

// keyValueFlag collects a repeatable KEY=VALUE flag.
type keyValueFlag struct {
	pairs [][2]string
}

func (f *keyValueFlag) String() string { return "" }

func (f *keyValueFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("%q is not KEY=VALUE", v)
	}
	f.pairs = append(f.pairs, [2]string{k, val})
	return nil
}

// into adds the pairs to *m, making it when needed.
func (f *keyValueFlag) into(m *map[string]string) {
	for _, kv := range f.pairs {
		if *m == nil {
			*m = map[string]string{}
		}
		(*m)[kv[0]] = kv[1]
	}
}

// loadJobFile reads a YAML (or JSON) job file into req, rejecting unknown
// fields with the field's name.
func loadJobFile(path string, stdin io.Reader, req *berth.SubmitRequest) error {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return &berth.Error{Code: berth.ECodeInvalid, Field: "-f", Err: err}
	}
	if err := berth.DecodeYAML(data, req); err != nil {
		e := err.(*berth.Error)
		return berth.Invalidf(cmp.Or(e.Field, "-f"), "in %s: %s", path, e.Text())
	}
	return nil
}

func runSubmit(ctx context.Context, m *Main, args []string) error {
	return submitJobs(ctx, m, args, "submit", berth.KindBatch)
}

// runServe submits a service: a job that runs until stopped, restarted
// when it ends, listed with its endpoint once ready.
func runServe(ctx context.Context, m *Main, args []string) error {
	return submitJobs(ctx, m, args, "serve", berth.KindService)
}

// submitJobs is berth submit and berth serve: jobs of kind unless the job
// file says otherwise.
func submitJobs(ctx context.Context, m *Main, args []string, command, kind string) error {
	fs := m.flagSet(command, "[flags] [-- COMMAND ARGS...]")
	cf := m.addClientFlags(fs, true)
	template := fs.String("template", "", "run from a template: vllm, jupyterlab, notebook or one of the server's --templates")
	var vars keyValueFlag
	fs.Var(&vars, "var", "KEY=VALUE template variable, e.g. MODEL_NAME=Qwen/Qwen2-7B-Instruct (repeatable)")
	file := fs.String("f", "", "job file (YAML or JSON; - for stdin); flags override its fields")
	name := fs.String("name", "", "job name")
	// Defaults are those of a job that does not set the field (they show
	// in -h); a flag is applied only when given, over the job file's field.
	def := berth.DefaultJobSpec()
	queue := fs.String("queue", def.Queue, "queue")
	gpus := fs.Int("gpus", def.Resources.GPUs, "GPUs per node")
	gpuType := fs.String("gpu-type", "", "GPU model: a whole word of it, any case (H100 matches \"NVIDIA H100 80GB HBM3\"; A10 does not match A100)")
	gpuMem := fs.String("gpu-memory", "", "least memory per GPU, e.g. 40GiB")
	cpus := fs.Float64("cpus", def.Resources.CPUs, "CPUs per node")
	memory := fs.String("memory", "", "memory per node, e.g. 16GiB")
	nodes := fs.Int("nodes", def.Nodes, "nodes (gang size)")
	priority := fs.Int("priority", def.Priority, "priority 0-1000")
	array := fs.Int("array", 0, "submit N jobs as an array; each gets BERTH_ARRAY_INDEX 0..N-1 (0: one job, not an array)")
	retries := fs.Int("retries", def.Retries, fmt.Sprintf("times a failed or lost attempt is retried (a service's default: %d)", berth.DefaultServiceRestarts))
	var maxRuntime, stallTimeout time.Duration
	durationVar(fs, &maxRuntime, "max-runtime", 0, "kill the job after this long, a `duration` such as 2h or 3d (exit code 75)")
	durationVar(fs, &stallTimeout, "stall-timeout", 0, "kill the job when it writes no output and reports no progress for this long, a `duration` (exit code 76)")
	workdir := fs.String("workdir", "", "working directory on the worker (default: the current directory)")
	host := fs.String("host", "", "run only on the worker with this host label")
	labels := fs.String("labels", "", "comma-separated KEY=VALUE worker labels required")
	preemptible := fs.Bool("preemptible", false, "a more urgent job may stop this one (it is requeued without spending a retry)")
	model := fs.String("model", "", "model the job serves or trains; placed preferably where it is loaded")
	user := fs.String("user", "", "user the job runs for (quotas and fair share count it)")
	idem := fs.String("idempotency-key", "", "your key for this request: a repeat of it returns the first submission's jobs; another request under it is refused")
	parent := fs.String("parent", "", "the job these are submitted under (in a job: $BERTH_JOB_ID); they are cancelled when it fails or is cancelled")
	wait := fs.Bool("wait", false, "wait for the jobs to end; exit 0 only if all succeeded")
	var env keyValueFlag
	fs.Var(&env, "env", "KEY=VALUE environment variable (repeatable)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	req := berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
	req.Kind = kind
	if *file != "" {
		if err := loadJobFile(*file, os.Stdin, &req); err != nil {
			return err
		}
	}
	set := givenFlags(fs)
	if cmd := fs.Args(); len(cmd) > 0 {
		req.Command = cmd
	}
	if set["name"] {
		req.Name = *name
	}
	if set["template"] {
		req.Template = *template
	}
	vars.into(&req.Vars)
	if set["queue"] {
		req.Queue = *queue
	}
	if set["gpus"] {
		req.Resources.GPUs = *gpus
	}
	if set["gpu-type"] {
		req.Resources.GPUType = *gpuType
	}
	if set["cpus"] {
		req.Resources.CPUs = *cpus
	}
	if set["nodes"] {
		req.Nodes = *nodes
	}
	if set["priority"] {
		req.Priority = *priority
	}
	if set["array"] {
		req.Array = *array
	}
	if set["retries"] {
		req.Retries = *retries
	}
	if set["max-runtime"] {
		req.MaxRuntime = berth.Duration(maxRuntime)
	}
	if set["stall-timeout"] {
		req.StallTimeout = berth.Duration(stallTimeout)
	}
	if set["host"] {
		req.Constraints.Host = *host
	}
	if set["idempotency-key"] {
		req.IdempotencyKey = *idem
	}
	if set["preemptible"] {
		req.Preemptible = *preemptible
	}
	if set["model"] {
		req.Model = *model
	}
	if set["user"] {
		req.User = *user
	}
	if set["parent"] {
		req.Parent = *parent
	}
	for _, sz := range []struct {
		flag string
		val  string
		dst  *berth.Bytes
	}{{"gpu-memory", *gpuMem, &req.Resources.GPUMemory}, {"memory", *memory, &req.Resources.Memory}} {
		if set[sz.flag] {
			b, err := berth.ParseBytes(sz.val)
			if err != nil {
				return &berth.Error{Code: berth.ECodeInvalid, Field: "--" + sz.flag, Err: err}
			}
			*sz.dst = b
		}
	}
	if set["labels"] {
		l, err := parseKeyValues(*labels, "--labels")
		if err != nil {
			return err
		}
		req.Constraints.Labels = l
	}
	env.into(&req.Env)
	if set["workdir"] {
		req.Workdir = *workdir
	} else if req.Workdir == "" {
		if wd, err := os.Getwd(); err == nil {
			req.Workdir = wd
		}
	}
	if req.User == "" {
		req.User = m.defaultUser(cf)
	}
	if len(req.Command) == 0 && req.Template == "" {
		return berth.Invalidf("command", "give the command after --, e.g. berth %s -- python train.py, or in -f FILE, or a --template", command)
	}
	if err := req.Validate(); err != nil {
		return err
	}
	c := m.client(cf)
	answer, err := c.SubmitAnswer(ctx, &req, cf.output != "json")
	if err != nil {
		return err
	}
	m.noteReplay(&req, answer.Replayed)
	for _, w := range answer.Warnings {
		fmt.Fprintf(m.Stderr, "berth: warning: %s\n", w)
	}
	switch {
	case cf.output == "json" && *wait:
		// stdout holds one JSON document: the jobs as they ended.
		waited := m.waitFor(ctx, c, answer.IDs, false, time.Duration(0), waitReport{summary: m.Stderr})
		jobs := answer.Jobs // as submitted when interrupted, so that their ids are not lost
		if ctx.Err() == nil {
			var err error
			if jobs, err = jobsNow(ctx, c, answer.IDs); err != nil {
				return err
			}
		}
		if err := printJSON(m.Stdout, jobs); err != nil {
			return err
		}
		return waited
	case cf.output == "json":
		return printJSON(m.Stdout, answer.Jobs)
	}
	fmt.Fprintln(m.Stdout, strings.Join(answer.IDs, "\n"))
	if !*wait {
		return nil
	}
	return m.waitFor(ctx, c, answer.IDs, false, time.Duration(0), waitReport{summary: m.Stdout})
}

// jobsNow reads the jobs ids as they are now, a few requests at a time.
func jobsNow(ctx context.Context, c *client.Client, ids []string) ([]*berth.Job, error) {
	jobs := make([]*berth.Job, len(ids))
	errs := make([]error, len(ids))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(8, len(ids)) {
		wg.Go(func() {
			for i := range next {
				var d *berth.JobDetail
				if d, errs[i] = c.Job(ctx, ids[i]); errs[i] == nil {
					jobs[i] = d.Job
				}
			}
		})
	}
	for i := range ids {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return jobs, nil
}

// noteReplay tells the user on stderr when the server answered req, which
// has an idempotency key of theirs, with the jobs of an earlier submission
// (replayed). A key the client made up for failover is no news to them.
func (m *Main) noteReplay(req *berth.SubmitRequest, replayed bool) {
	if replayed && req.IdempotencyKey != "" {
		fmt.Fprintf(m.Stderr, "berth: already submitted with idempotency key %s (the jobs below are the first submission's)\n", req.IdempotencyKey)
	}
}
