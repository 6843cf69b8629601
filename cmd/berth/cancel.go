package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/berth-dev/berth"
)

// cancelUsage is berth cancel's help text before its flags.
const cancelUsage = `ID... | --name N | --queue Q | --user U | --parent ID [--state S]

Cancels the jobs named by id, or every active job matching the filters (as
scancel --name/--partition/--user does): a whole array by its name, say, in
one request. --state narrows the filters to pending or running jobs.

Cancelling is idempotent: an id whose job has already ended, or filters
that match no active job, exit 0 with a note on stderr.`

func runCancel(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("cancel", cancelUsage)
	cf := m.addClientFlags(fs, true)
	name := fs.String("name", "", "cancel the active jobs with this name (an array's jobs share it)")
	queue := fs.String("queue", "", "cancel the active jobs of this queue")
	user := fs.String("user", "", "cancel this user's active jobs")
	parent := fs.String("parent", "", "cancel the active jobs submitted under this job")
	state := fs.String("state", "", "with filters: only pending or only running jobs")
	ids, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	filtered := *name != "" || *queue != "" || *user != "" || *parent != ""
	switch {
	case filtered && len(ids) > 0:
		return berth.Invalidf("id", "give job ids or filters (--name, --queue, --user, --parent), not both")
	case !filtered && len(ids) == 0:
		return berth.Invalidf("id", "give at least one job id, or filters (--name, --queue, --user, --parent)")
	case !filtered && *state != "":
		return berth.Invalidf("--state", "narrows filters: give --name, --queue, --user or --parent too")
	}
	c := m.client(cf)
	if filtered {
		jobs, err := c.CancelMatching(ctx, berth.CancelRequest{Name: *name, Queue: *queue, User: *user,
			Parent: *parent, State: berth.JobState(*state)})
		if err != nil {
			return err
		}
		if len(jobs) == 0 {
			fmt.Fprintln(m.Stderr, "berth: no active job matches")
		}
		return printCancelled(m, cf.output, jobs)
	}
	failed := 0
	var cancelled []*berth.Job
	for _, id := range ids {
		j, err := c.Cancel(ctx, id)
		var ended *berth.Error
		if errors.As(err, &ended) && ended.Code == berth.ECodeConflict {
			// Cancel is idempotent: a job that has ended needs nothing,
			// as filters that match nothing do.
			fmt.Fprintf(m.Stderr, "berth: %s; nothing to cancel\n", ended.Text())
			continue
		}
		if err != nil && len(ids) == 1 {
			return err // printed as the one line of any error
		}
		if err != nil {
			fmt.Fprintf(m.Stderr, "berth: %s: %s\n", id, errorLine(err))
			failed++
			continue
		}
		cancelled = append(cancelled, j)
	}
	if err := printCancelled(m, cf.output, cancelled); err != nil {
		return err
	}
	if failed > 0 {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("%d of %d cancels failed", failed, len(ids))}
	}
	return nil
}

// printCancelled prints the jobs a cancel stopped: a line each, or with
// -o json an array, never null.
func printCancelled(m *Main, output string, jobs []*berth.Job) error {
	if output != "table" {
		return printData(m.Stdout, output, append([]*berth.Job{}, jobs...))
	}
	for _, j := range jobs {
		if j.State == berth.JobCancelled {
			fmt.Fprintf(m.Stdout, "%s cancelled\n", j.ID)
		} else {
			fmt.Fprintf(m.Stdout, "%s stopping (SIGTERM sent; SIGKILL after the grace period)\n", j.ID)
		}
	}
	return nil
}
