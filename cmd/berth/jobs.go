package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
)

// jobsUsage is berth jobs's help text before its flags.
const jobsUsage = `[flags]

Lists jobs, newest first. The jobs of an array are one row, ID_[FIRST-LAST]
with a count of each state (as squeue shows them), unless --expand. HOST is
where a job runs or ran (a gang's first host and +N for the others).
-o wide adds columns, -o name prints job/ID lines and -q only the ids.`

func runJobs(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("jobs", jobsUsage)
	cf := m.addClientFlags(fs, true)
	cf.formats = append(cf.formats, "wide", "name")
	fs.Lookup("o").Usage = "output: table, wide (more columns), json, yaml or name (job/ID lines)"
	state := fs.String("state", "", "comma-separated states: pending, running, succeeded, failed, cancelled")
	queue := fs.String("queue", "", "only this queue")
	user := fs.String("user", "", "only this user's jobs")
	name := fs.String("name", "", "only the jobs of this name (an array's jobs share it)")
	parent := fs.String("parent", "", "only the jobs submitted under this job (submit --parent)")
	limit := fs.Int("limit", 100, "most jobs to list, newest first (0 for all)")
	expand := fs.Bool("expand", false, "list each job of an array on its own row")
	quiet := fs.Bool("q", false, "print only the job ids, one a line")
	page := addPageFlags(fs)
	if err := parseNoArgs(fs, cf, args, "berth jobs"); err != nil {
		return err
	}
	if *limit < 0 {
		return berth.Invalidf("--limit", "must be 0 (all) or more")
	}
	if *quiet && givenFlags(fs)["o"] {
		return berth.Invalidf("-q", "prints only ids: give -q or -o, not both")
	}
	opts := client.ListOptions{Queue: *queue, User: *user, Name: *name, Parent: *parent, Limit: *limit, Cursor: page.cursor}
	if *state != "" {
		for _, s := range strings.Split(*state, ",") {
			st, err := berth.ParseJobState(strings.TrimSpace(s))
			if err != nil {
				return berth.Invalidf("--state", "%v", err.(*berth.Error).Message)
			}
			opts.States = append(opts.States, st)
		}
	}
	list, err := m.client(cf).Jobs(ctx, opts)
	if err != nil {
		return page.serverError(err)
	}
	switch {
	case *quiet || cf.output == "name":
		prefix := "job/"
		if *quiet {
			prefix = ""
		}
		for _, j := range list.Jobs {
			fmt.Fprintln(m.Stdout, prefix+j.ID)
		}
	case cf.output == "table" || cf.output == "wide":
		rows := jobRows(list.Jobs, *expand)
		if err := jobsTable(m.Stdout, rows, cf.output == "wide"); err != nil {
			return err
		}
	default:
		if err := printList(m.Stdout, cf.output, listedJobs(list.Jobs), nil); err != nil {
			return err
		}
	}
	page.printNext(m.Stderr, list.NextCursor)
	return nil
}

// jobRow is a row of berth jobs: one job, or the jobs of an array listed
// together (first is then the one with the lowest index).
type jobRow struct {
	first   *berth.Job
	indexes []int                  // an array's indexes listed, lowest first; nil for one job
	states  map[berth.JobState]int // an array's jobs in each state
	hosts   []string               // an array's hosts, in the order of its jobs
}

// jobRows groups the jobs of each array, listed next to one another
// (their ids are consecutive), into one row, unless expand.
func jobRows(jobs []*berth.Job, expand bool) []*jobRow {
	var rows []*jobRow
	for _, j := range jobs {
		if prev := lastRow(rows); !expand && j.ArrayIndex != nil && prev != nil && prev.indexes != nil && sameArray(prev.first, j) {
			prev.add(j)
			continue
		}
		r := &jobRow{first: j}
		if !expand && j.ArrayIndex != nil {
			r.states = map[berth.JobState]int{}
			r.add(j)
		}
		rows = append(rows, r)
	}
	return rows
}

func lastRow(rows []*jobRow) *jobRow {
	if len(rows) == 0 {
		return nil
	}
	return rows[len(rows)-1]
}

// sameArray reports whether a and b were submitted as one array: the
// jobs of one submission share their creation time, name and user.
func sameArray(a, b *berth.Job) bool {
	return a.CreatedAt.Equal(b.CreatedAt) && a.Name == b.Name && a.User == b.User
}

func (r *jobRow) add(j *berth.Job) {
	if len(r.indexes) > 0 && *j.ArrayIndex < r.indexes[0] {
		r.first = j
	}
	r.indexes = append(r.indexes, *j.ArrayIndex)
	slices.Sort(r.indexes)
	r.states[j.State]++
	if j.Host != "" {
		r.hosts = append(r.hosts, j.Host)
	}
}

// id is the row's id: the job's, or ID_[LOW-HIGH] for an array, ID
// the job of the lowest index.
func (r *jobRow) id() string {
	if r.indexes == nil {
		return r.first.ID
	}
	lo, hi := r.indexes[0], r.indexes[len(r.indexes)-1]
	if lo == hi {
		return fmt.Sprintf("%s_[%d]", r.first.ID, lo)
	}
	return fmt.Sprintf("%s_[%d-%d]", r.first.ID, lo, hi)
}

// state is the job's state, or for an array how many of its jobs are in
// each: "3 running, 97 pending".
func (r *jobRow) state() string {
	if r.indexes == nil {
		return string(r.first.State)
	}
	var parts []string
	for _, st := range []berth.JobState{berth.JobRunning, berth.JobPending, berth.JobSucceeded, berth.JobFailed, berth.JobCancelled} {
		if n := r.states[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	return strings.Join(parts, ", ")
}

// host is where the row runs or ran: the job's host, or an array's first
// host and +N for the other jobs that have one.
func (r *jobRow) host() string {
	switch {
	case r.indexes == nil:
		return orDash(r.first.Host)
	case len(r.hosts) == 0:
		return "-"
	case len(r.hosts) == 1:
		return r.hosts[0]
	}
	return fmt.Sprintf("%s +%d", r.hosts[0], len(r.hosts)-1)
}

// jobsTable writes rows as the table of berth jobs; wide adds the
// resources, attempts and command.
func jobsTable(w io.Writer, rows []*jobRow, wide bool) error {
	now := time.Now()
	head := []string{"ID", "NAME", "USER", "QUEUE", "STATE", "HOST", "PRIO", "GPUS", "AGE", "REASON"}
	// CLUSTER: the federation peer a job was handed to, "-" for local.
	cluster := wide || slices.ContainsFunc(rows, func(r *jobRow) bool { return r.first.Cluster != "" })
	if cluster {
		head = slices.Insert(head, 5, "CLUSTER")
	}
	if wide {
		head = append(head, "NODES", "CPUS", "MEMORY", "ATTEMPTS", "EXIT", "COMMAND")
	}
	t := newTable(w, head...)
	for _, r := range rows {
		j := r.first
		row := []string{r.id(), truncate(j.Name, 24), truncate(j.User, 16), j.Queue, r.state(), r.host(), strconv.Itoa(j.Priority),
			berth.FormatGPUs(j.Resources.GPUsMilli()), ago(j.CreatedAt, now), truncate(j.Reason, 48)}
		if cluster {
			row = slices.Insert(row, 5, orDash(j.Cluster))
		}
		if wide {
			exit := "-"
			if j.ExitCode != nil && r.indexes == nil {
				exit = strconv.Itoa(*j.ExitCode)
			}
			row = append(row, strconv.Itoa(j.Nodes), strconv.FormatFloat(j.Resources.CPUs, 'g', -1, 64), orDash(j.Resources.Memory.String()),
				strconv.Itoa(j.Attempts), exit, truncate(strings.Join(j.Command, " "), 60))
		}
		t.row(row...)
	}
	return t.flush()
}

// listedJob is a job of berth jobs -o json|yaml: it always has cluster,
// "" for a local job, which the job's own encoding leaves out.
type listedJob struct {
	*berth.Job
	Cluster string `json:"cluster"`
}

// listedJobs returns jobs as berth jobs prints them in JSON or YAML.
func listedJobs(jobs []*berth.Job) []listedJob {
	out := make([]listedJob, len(jobs))
	for i, j := range jobs {
		out[i] = listedJob{Job: j, Cluster: j.Cluster}
	}
	return out
}

func runJob(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("job", "[flags] ID")
	cf := m.addClientFlags(fs, true)
	id, err := parseOneArg(fs, cf, args, "id", "give exactly one job id")
	if err != nil {
		return err
	}
	d, err := m.client(cf).Job(ctx, id)
	if err != nil {
		return err
	}
	if cf.output != "table" {
		return printData(m.Stdout, cf.output, d)
	}
	j := d.Job
	w := m.Stdout
	fmt.Fprintf(w, "ID:        %s\nName:      %s\nUser:      %s\nQueue:     %s\nState:     %s\n", j.ID, j.Name, j.User, j.Queue, j.State)
	if j.Reason != "" {
		label := "Reason:"
		if j.State == berth.JobPending {
			label = "Waiting:"
		}
		fmt.Fprintf(w, "%-10s %s\n", label, j.Reason)
	}
	if j.ExitCode != nil {
		fmt.Fprintf(w, "Exit code: %d\n", *j.ExitCode)
	}
	if j.Parent != "" {
		fmt.Fprintf(w, "Parent:    %s\n", j.Parent)
	}
	if j.MaxRuntime > 0 || j.StallTimeout > 0 {
		fmt.Fprintf(w, "Watchdogs: max_runtime=%s stall_timeout=%s\n", orDash(durationOrEmpty(j.MaxRuntime)), orDash(durationOrEmpty(j.StallTimeout)))
	}
	fmt.Fprintf(w, "Priority:  %d\nCommand:   %s\n", j.Priority, j.Command)
	if j.Backend != "" {
		fmt.Fprintf(w, "Backend:   %s\n", j.Backend)
	}
	if j.Image != "" {
		fmt.Fprintf(w, "Image:     %s\n", j.Image)
	}
	r := j.Resources
	fmt.Fprintf(w, "Resources: gpus=%s", berth.FormatGPUs(r.GPUsMilli()))
	if r.GPUMilli > 0 {
		fmt.Fprintf(w, " (a share of one GPU: %d milli)", r.GPUMilli)
	}
	if r.GPUType != "" {
		fmt.Fprintf(w, " gpu_type=%s", r.GPUType)
	}
	if r.GPUMemory > 0 {
		fmt.Fprintf(w, " gpu_memory=%s", r.GPUMemory)
	}
	fmt.Fprintf(w, " cpus=%g memory=%s\n", r.CPUs, r.Memory)
	if j.Nodes > 1 {
		fmt.Fprintf(w, "Nodes:     %d (a gang: each gets these resources)\n", j.Nodes)
	}
	if c := j.Constraints; c.Host != "" || len(c.Labels) > 0 {
		fmt.Fprintf(w, "Placement: %s\n", placementText(c))
	}
	if j.Workdir != "" {
		fmt.Fprintf(w, "Workdir:   %s\n", j.Workdir)
	}
	if len(j.Env) > 0 {
		fmt.Fprintf(w, "Env:       %s (values: -o json)\n", strings.Join(slices.Sorted(maps.Keys(j.Env)), " "))
	}
	if j.ArrayIndex != nil {
		fmt.Fprintf(w, "Array:     index %d\n", *j.ArrayIndex)
	}
	// Attempts counts only those that spend the retry budget: an attempt
	// an operator stopped or a preemption ended is listed below but given
	// back.
	fmt.Fprintf(w, "Retries:   %d (attempts counted: %d of %d)\nCreated:   %s\n", j.Retries, j.Attempts, j.Retries+1, j.CreatedAt.Local().Format(time.RFC3339))
	if !j.StartedAt.IsZero() {
		fmt.Fprintf(w, "Started:   %s\n", j.StartedAt.Local().Format(time.RFC3339))
	}
	if !j.FinishedAt.IsZero() {
		fmt.Fprintf(w, "Finished:  %s (ran %s)\n", j.FinishedAt.Local().Format(time.RFC3339), j.FinishedAt.Sub(j.StartedAt).Round(time.Millisecond))
	}
	if j.Cluster != "" {
		printHandoffs(w, d)
	}
	if len(d.AttemptList) > 0 {
		// DEVICES: the GPU indexes the attempt got, its CUDA_VISIBLE_DEVICES.
		fmt.Fprintln(w, "\nAttempts:")
		// A gang's attempts are its members, told apart by RANK.
		head := []string{"  ID", "HOST", "DEVICES", "STATE", "EXIT", "PROGRESS", "REASON"}
		if j.Nodes > 1 {
			head = slices.Insert(head, 1, "RANK")
		}
		t := newTable(w, head...)
		for _, a := range d.AttemptList {
			exit := "-"
			if a.ExitCode != nil {
				exit = strconv.Itoa(*a.ExitCode)
			}
			gpus := make([]string, len(a.GPUs))
			for i, g := range a.GPUs {
				gpus[i] = strconv.Itoa(g)
			}
			devices := strings.Join(gpus, ",")
			if r.GPUMilli > 0 && devices != "" {
				devices += " (shared, " + berth.FormatGPUs(r.GPUMilli) + ")"
			}
			row := []string{"  " + a.ID, a.Host, orDash(devices), string(a.State), exit, orDash(a.Progress), a.Reason}
			if j.Nodes > 1 {
				row = slices.Insert(row, 1, strconv.Itoa(a.TaskIndex))
			}
			t.row(row...)
		}
		return t.flush()
	}
	return nil
}

// placementText says where a job may run: "host gpu-1, labels zone=a".
func placementText(c berth.Constraints) string {
	var parts []string
	if c.Host != "" {
		parts = append(parts, "host "+c.Host)
	}
	if len(c.Labels) > 0 {
		labels := make([]string, 0, len(c.Labels))
		for _, k := range slices.Sorted(maps.Keys(c.Labels)) {
			labels = append(labels, k+"="+c.Labels[k])
		}
		parts = append(parts, "labels "+strings.Join(labels, ","))
	}
	return strings.Join(parts, ", ")
}

// durationOrEmpty formats d, or "" for 0.
func durationOrEmpty(d berth.Duration) string {
	if d == 0 {
		return ""
	}
	return time.Duration(d).String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printHandoffs writes where a job handed to a federation peer stands:
// the peer, and each incarnation's handle (remote id, state, nonce, the
// peer's id of the job, the last error). While the job waits on the peer
// its reason, above, is the peer's.
func printHandoffs(w io.Writer, d *berth.JobDetail) {
	fmt.Fprintf(w, "Cluster:   %s (handed to this federation peer)\n", d.Cluster)
	if len(d.Handoffs) == 0 {
		fmt.Fprintln(w, "Handoff:   none yet (waiting to be routed)")
		return
	}
	fmt.Fprintln(w, "\nHandoffs:")
	t := newTable(w, "  INCARNATION", "PEER", "STATE", "REMOTE ID", "PEER JOB", "NONCE", "LAST ERROR")
	for _, h := range d.Handoffs {
		t.row("  "+strconv.Itoa(h.Incarnation), h.Peer, string(h.State), h.RemoteID, orDash(h.RemoteJobID), h.Nonce, orDash(h.LastError))
	}
	_ = t.flush()
	fmt.Fprintln(w)
}
