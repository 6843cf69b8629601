package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
)

func runWait(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("wait", "ID... | --all [--timeout D]")
	cf := m.addClientFlags(fs, false)
	all := fs.Bool("all", false, "wait for every job active now")
	var timeout time.Duration
	durationVar(fs, &timeout, "timeout", 0, "give up after this long, a `duration` (exit 124); 0 waits forever")
	ids, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	if *all == (len(ids) > 0) {
		return berth.Invalidf("id", "give job ids or --all, not both and not neither")
	}
	if timeout < 0 {
		return berth.Invalidf("--timeout", "must not be negative")
	}
	return m.waitFor(ctx, m.client(cf), ids, *all, timeout)
}

// waitFor waits and reports: exit 0 when every job succeeded, 1 when any
// failed or was cancelled, 124 on timeout.
func (m *Main) waitFor(ctx context.Context, c *client.Client, ids []string, all bool, timeout time.Duration) error {
	res, err := c.Wait(ctx, ids, all, timeout)
	if err != nil {
		return err
	}
	var parts []string
	for _, st := range []berth.JobState{berth.JobSucceeded, berth.JobFailed, berth.JobCancelled} {
		if n := res.Counts[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	if res.Pending > 0 {
		parts = append(parts, fmt.Sprintf("%d still active", res.Pending))
	}
	if len(parts) == 0 {
		parts = append(parts, "no jobs to wait for")
	}
	fmt.Fprintln(m.Stdout, strings.Join(parts, ", "))
	switch {
	case !res.Done:
		return &exitError{code: exitTimeout, msg: "timed out waiting"}
	case len(res.Failures) > 0:
		shown := res.Failures
		if len(shown) > 10 {
			shown = shown[:10]
		}
		return &exitError{code: exitFailed, msg: "not all jobs succeeded: " + strings.Join(shown, " ")}
	}
	return nil
}
