package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
	"github.com/berth-dev/berth/internal/strict"
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
	if err := strict.DecodeYAML(data, req); err != nil {
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
	cf.formats = []string{"table", "json"}
	wait := fs.Bool("wait", false, "wait for the jobs to end; exit 0 only if all succeeded")
	jf := defineSubmitFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	req, err := jf.request(m, cf, command, kind)
	if err != nil {
		return err
	}
	c := m.client(cf)
	sub, err := c.SubmitFull(ctx, req, cf.output != "json")
	if err != nil {
		return err
	}
	m.noteReplay(req, sub.Replayed)
	return m.printSubmission(ctx, c, sub, cf.output == "json", *wait)
}

// submitFlags are the flags that make a job's request, shared by berth
// submit, serve and run: the job file and the job flags.
type submitFlags struct {
	fs     *flag.FlagSet
	file   *string
	fields []jobFlag
}

// defineSubmitFlags defines the job file (-f) and the job flags on fs.
func defineSubmitFlags(fs *flag.FlagSet) *submitFlags {
	file := fs.String("f", "", "job file (YAML or JSON; - for stdin); flags override its fields")
	return &submitFlags{fs: fs, file: file, fields: defineJobFlags(fs)}
}

// request builds and validates the request of the parsed flags: a job of
// kind unless the job file says otherwise, running the arguments after
// the flags. An error names the flag or field at fault.
func (jf *submitFlags) request(m *Main, cf *clientFlags, command, kind string) (*berth.SubmitRequest, error) {
	req := &berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
	req.Kind = kind
	if *jf.file != "" {
		if err := loadJobFile(*jf.file, os.Stdin, req); err != nil {
			return nil, err
		}
	}
	if cmd := jf.fs.Args(); len(cmd) > 0 {
		req.Command = cmd
	}
	set := givenFlags(jf.fs)
	for _, f := range jf.fields {
		if set[f.name] {
			if err := f.apply(req); err != nil {
				return nil, err
			}
		}
	}
	if req.Workdir == "" && !set["workdir"] {
		if wd, err := os.Getwd(); err == nil {
			req.Workdir = wd
		}
	}
	if req.User == "" {
		req.User = m.defaultUser(cf)
	}
	if len(req.Command) == 0 && req.Template == "" {
		return nil, berth.Invalidf("command", "give the command after --, e.g. berth %s -- python train.py, or in -f FILE, or a --template", command)
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return req, nil
}

// printSubmission prints the warnings of sub and its jobs: their ids, one
// a line, or with asJSON the jobs in full; with wait, it waits for them to
// end and returns an error unless all succeeded (with asJSON, printing
// the jobs as they ended).
func (m *Main) printSubmission(ctx context.Context, c *client.Client, sub *client.Submission, asJSON, wait bool) error {
	for _, w := range sub.Warnings {
		fmt.Fprintf(m.Stderr, "berth: warning: %s\n", w)
	}
	switch {
	case asJSON && wait:
		// stdout holds one JSON document: the jobs as they ended.
		waited := m.waitFor(ctx, c, sub.IDs, false, time.Duration(0), waitReport{summary: m.Stderr})
		jobs := sub.Jobs // as submitted when interrupted, so that their ids are not lost
		if ctx.Err() == nil {
			var err error
			if jobs, err = jobsNow(ctx, c, sub.IDs); err != nil {
				return err
			}
		}
		if err := printJSON(m.Stdout, jobs); err != nil {
			return err
		}
		return waited
	case asJSON:
		return printJSON(m.Stdout, sub.Jobs)
	}
	fmt.Fprintln(m.Stdout, strings.Join(sub.IDs, "\n"))
	if !wait {
		return nil
	}
	return m.waitFor(ctx, c, sub.IDs, false, time.Duration(0), waitReport{summary: m.Stdout})
}

// jobFlag is a flag of berth submit and serve that sets a field of the
// request. apply sets the field from the flag's value; it runs only when
// the flag is given, over the job file's field, and an error it returns
// is ECodeInvalid naming the flag.
type jobFlag struct {
	name  string
	apply func(req *berth.SubmitRequest) error
}

// defineJobFlags defines on fs the flags that set fields of the request,
// one row each, with the defaults of a job that does not set the field
// (they show in -h), and returns them in the order they apply.
func defineJobFlags(fs *flag.FlagSet) []jobFlag {
	type req = berth.SubmitRequest
	def := berth.DefaultJobSpec()
	duration := func(name string, value time.Duration, usage string) *time.Duration {
		p := new(time.Duration)
		durationVar(fs, p, name, value, usage)
		return p
	}
	return []jobFlag{
		field(fs.String, "name", "", "job name", func(r *req, v string) { r.Name = v }),
		field(fs.String, "template", "", "run from a template: vllm, jupyterlab, notebook or one of the server's --templates",
			func(r *req, v string) { r.Template = v }),
		keyValuesFlag(fs, "var", "KEY=VALUE template variable, e.g. MODEL_NAME=Qwen/Qwen2-7B-Instruct (repeatable)",
			func(r *req) *map[string]string { return &r.Vars }),
		field(fs.String, "queue", def.Queue, "queue", func(r *req, v string) { r.Queue = v }),
		gpusFlag(fs),
		field(fs.Int, "gpu-milli", 0, "a fraction of one GPU per node in thousandths, 1-999 (500: --gpus 0.5)",
			func(r *req, v int) { r.Resources.GPUs, r.Resources.GPUMilli = 0, v }),
		field(fs.String, "gpu-type", "", "GPU model: a whole word of it, any case (H100 matches \"NVIDIA H100 80GB HBM3\"; A10 does not match A100)",
			func(r *req, v string) { r.Resources.GPUType = v }),
		field(fs.Float64, "cpus", def.Resources.CPUs, "CPUs per node", func(r *req, v float64) { r.Resources.CPUs = v }),
		field(fs.Int, "nodes", def.Nodes, "nodes (gang size)", func(r *req, v int) { r.Nodes = v }),
		field(fs.Int, "priority", def.Priority, "priority 0-1000", func(r *req, v int) { r.Priority = v }),
		field(fs.Int, "array", 0, "submit N jobs as an array; each gets BERTH_ARRAY_INDEX 0..N-1 (0: one job, not an array)",
			func(r *req, v int) { r.Array = v }),
		field(fs.Int, "retries", def.Retries, fmt.Sprintf("times a failed or lost attempt is retried (a service's default: %d)", berth.DefaultServiceRestarts),
			func(r *req, v int) { r.Retries = v }),
		field(duration, "max-runtime", 0, "kill the job after this long, a `duration` such as 2h or 3d (exit code 75)",
			func(r *req, v time.Duration) { r.MaxRuntime = berth.Duration(v) }),
		field(duration, "stall-timeout", 0, "kill the job when it writes no output and reports no progress for this long, a `duration` (exit code 76)",
			func(r *req, v time.Duration) { r.StallTimeout = berth.Duration(v) }),
		field(fs.String, "host", "", "run only on the worker with this host label",
			func(r *req, v string) { r.Constraints.Host = v }),
		field(fs.String, "idempotency-key", "", "your key for this request: a repeat of it returns the first submission's jobs; another request under it is refused",
			func(r *req, v string) { r.IdempotencyKey = v }),
		field(fs.Bool, "hold-until-fits", false, "queue the job even when no worker could ever run it (it waits for one that fits) instead of refusing it",
			func(r *req, v bool) { r.HoldUntilFits = v }),
		field(fs.Bool, "preemptible", false, "a more urgent job may stop this one (it is requeued without spending a retry)",
			func(r *req, v bool) { r.Preemptible = v }),
		field(fs.String, "model", "", "model the job serves or trains; placed preferably where it is loaded",
			func(r *req, v string) { r.Model = v }),
		field(fs.String, "user", "", "user the job runs for (quotas and fair share count it)",
			func(r *req, v string) { r.User = v }),
		field(fs.String, "cluster", "", "hand the jobs to this federation peer (berth peers lists them) instead of choosing where they run",
			func(r *req, v string) { r.Cluster = v }),
		field(fs.String, "parent", "", "the job these are submitted under (in a job: $BERTH_JOB_ID); they are cancelled when it fails or is cancelled",
			func(r *req, v string) { r.Parent = v }),
		bytesFlag(fs, "gpu-memory", "least memory per GPU, e.g. 40GiB; for a fraction, the GPU memory it takes",
			func(r *req) *berth.Bytes { return &r.Resources.GPUMemory }),
		bytesFlag(fs, "memory", "memory per node, e.g. 16GiB", func(r *req) *berth.Bytes { return &r.Resources.Memory }),
		labelsFlag(fs, "labels", "comma-separated KEY=VALUE worker labels required",
			func(r *req) *map[string]string { return &r.Constraints.Labels }),
		keyValuesFlag(fs, "env", "KEY=VALUE environment variable (repeatable)",
			func(r *req) *map[string]string { return &r.Env }),
		field(fs.String, "workdir", "", "working directory on the worker (default: the current directory)",
			func(r *req, v string) { r.Workdir = v }),
	}
}

// field defines flag name with define (fs.String, fs.Int, …) and returns
// its row: set copies the flag's value into the request.
func field[T any](define func(name string, value T, usage string) *T, name string, value T, usage string, set func(*berth.SubmitRequest, T)) jobFlag {
	v := define(name, value, usage)
	return jobFlag{name, func(r *berth.SubmitRequest) error {
		set(r, *v)
		return nil
	}}
}

// gpusFlag defines --gpus: whole GPUs per node, or a fraction of one GPU
// below 1 (0.5), which other fractions share.
func gpusFlag(fs *flag.FlagSet) jobFlag {
	v := fs.String("gpus", "", "GPUs per node: a whole `number`, or a fraction of one GPU such as 0.5, shared with other fractions")
	return jobFlag{"gpus", func(r *berth.SubmitRequest) error {
		gpus, milli, err := berth.ParseGPUs(*v)
		if err != nil {
			return &berth.Error{Code: berth.ECodeInvalid, Field: "--gpus", Err: err}
		}
		r.Resources.GPUs, r.Resources.GPUMilli = gpus, milli
		return nil
	}}
}

// bytesFlag defines a size flag such as 16GiB, stored where dst points.
func bytesFlag(fs *flag.FlagSet, name, usage string, dst func(*berth.SubmitRequest) *berth.Bytes) jobFlag {
	v := fs.String(name, "", usage)
	return jobFlag{name, func(r *berth.SubmitRequest) error {
		b, err := berth.ParseBytes(*v)
		if err != nil {
			return &berth.Error{Code: berth.ECodeInvalid, Field: "--" + name, Err: err}
		}
		*dst(r) = b
		return nil
	}}
}

// labelsFlag defines a flag of comma-separated KEY=VALUE pairs, which
// replace the map dst points to.
func labelsFlag(fs *flag.FlagSet, name, usage string, dst func(*berth.SubmitRequest) *map[string]string) jobFlag {
	v := fs.String(name, "", usage)
	return jobFlag{name, func(r *berth.SubmitRequest) error {
		l, err := parseKeyValues(*v, "--"+name)
		if err != nil {
			return err
		}
		*dst(r) = l
		return nil
	}}
}

// keyValuesFlag defines a repeatable KEY=VALUE flag, whose pairs are added
// to the map dst points to.
func keyValuesFlag(fs *flag.FlagSet, name, usage string, dst func(*berth.SubmitRequest) *map[string]string) jobFlag {
	var f keyValueFlag
	fs.Var(&f, name, usage)
	return jobFlag{name, func(r *berth.SubmitRequest) error {
		f.into(dst(r))
		return nil
	}}
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
