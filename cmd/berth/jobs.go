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

func runJobs(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("jobs", "[flags]")
	cf := m.addClientFlags(fs, true)
	state := fs.String("state", "", "comma-separated states: pending, running, succeeded, failed, cancelled")
	queue := fs.String("queue", "", "only this queue")
	user := fs.String("user", "", "only this user's jobs")
	parent := fs.String("parent", "", "only the jobs submitted under this job (submit --parent)")
	limit := fs.Int("limit", 100, "most jobs to list, newest first (0 for all)")
	page := addPageFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	if *limit < 0 {
		return berth.Invalidf("--limit", "must be 0 (all) or more")
	}
	opts := client.ListOptions{Queue: *queue, User: *user, Parent: *parent, Limit: *limit, Cursor: page.cursor}
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
	if err := printList(m.Stdout, cf.output, list.Jobs, func() error { return jobsTable(m.Stdout, list.Jobs) }); err != nil {
		return err
	}
	page.printNext(m.Stderr, list.NextCursor)
	return nil
}

// jobsTable writes jobs as the table of berth jobs.
func jobsTable(w io.Writer, jobs []*berth.Job) error {
	now := time.Now()
	t := newTable(w, "ID", "NAME", "USER", "QUEUE", "STATE", "PRIO", "GPUS", "AGE", "REASON")
	for _, j := range jobs {
		t.row(j.ID, truncate(j.Name, 24), truncate(j.User, 16), j.Queue, string(j.State), strconv.Itoa(j.Priority),
			strconv.Itoa(j.Resources.GPUs), ago(j.CreatedAt, now), truncate(j.Reason, 48))
	}
	return t.flush()
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
	if cf.output == "json" {
		return printJSON(m.Stdout, d)
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
	r := j.Resources
	fmt.Fprintf(w, "Resources: gpus=%d", r.GPUs)
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
	fmt.Fprintf(w, "Retries:   %d (attempts so far: %d)\nCreated:   %s\n", j.Retries, j.Attempts, j.CreatedAt.Local().Format(time.RFC3339))
	if !j.StartedAt.IsZero() {
		fmt.Fprintf(w, "Started:   %s\n", j.StartedAt.Local().Format(time.RFC3339))
	}
	if !j.FinishedAt.IsZero() {
		fmt.Fprintf(w, "Finished:  %s (ran %s)\n", j.FinishedAt.Local().Format(time.RFC3339), j.FinishedAt.Sub(j.StartedAt).Round(time.Millisecond))
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
			row := []string{"  " + a.ID, a.Host, orDash(strings.Join(gpus, ",")), string(a.State), exit, orDash(a.Progress), a.Reason}
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
