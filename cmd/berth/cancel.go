package main

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
)

// cancelUsage is berth cancel's help text before its flags.
const cancelUsage = `ID... | --name N | --queue Q | --user U | --parent ID [--state S]

Cancels the jobs named by id, or every active job matching the filters (as
scancel --name/--partition/--user does): a whole array by its name, say.
--state narrows the filters to pending or running jobs.`

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
		states := []berth.JobState{berth.JobPending, berth.JobRunning}
		if *state != "" {
			st, err := berth.ParseJobState(*state)
			if err != nil || !slices.Contains(states, st) {
				return berth.Invalidf("--state", "must be pending or running")
			}
			states = []berth.JobState{st}
		}
		if ids, err = matchingJobs(ctx, c, client.ListOptions{States: states, Queue: *queue, User: *user, Parent: *parent}, *name); err != nil {
			return err
		}
		if len(ids) == 0 {
			fmt.Fprintln(m.Stderr, "berth: no active job matches")
		}
	}
	failed := 0
	cancelled := []*berth.Job{} // for -o json: an array, never null
	for _, id := range ids {
		j, err := c.Cancel(ctx, id)
		if err != nil && len(ids) == 1 && !filtered {
			return err // printed as the one line of any error
		}
		var e *berth.Error
		if filtered && errors.As(err, &e) && e.Code == berth.ECodeConflict {
			continue // ended since it was listed (a cancelled parent's child, say)
		}
		if err != nil {
			fmt.Fprintf(m.Stderr, "berth: %s: %s\n", id, errorLine(err))
			failed++
			continue
		}
		switch {
		case cf.output == "json":
			cancelled = append(cancelled, j)
		case j.State == berth.JobCancelled:
			fmt.Fprintf(m.Stdout, "%s cancelled\n", id)
		default:
			fmt.Fprintf(m.Stdout, "%s stopping (SIGTERM sent; SIGKILL after the grace period)\n", id)
		}
	}
	if cf.output == "json" {
		if err := printJSON(m.Stdout, cancelled); err != nil {
			return err
		}
	}
	if failed > 0 {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("%d of %d cancels failed", failed, len(ids))}
	}
	return nil
}

// matchingJobs returns the ids of the jobs o lists, those named name when
// name is not empty, oldest first.
func matchingJobs(ctx context.Context, c *client.Client, o client.ListOptions, name string) ([]string, error) {
	list, err := c.Jobs(ctx, o) // Limit 0: every match
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, j := range slices.Backward(list.Jobs) {
		if name == "" || j.Name == name {
			ids = append(ids, j.ID)
		}
	}
	return ids, nil
}
