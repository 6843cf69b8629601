package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
)

// waitUsage is berth wait's help text before its flags.
const waitUsage = `ID... | --all [--timeout D]

Waits until the jobs have ended: exit 0 when every one succeeded, 1 when any
failed or was cancelled, 124 when --timeout ran out. --all waits for the batch
jobs active now (your own, unless your role reads every user's jobs), not for
services: they run until stopped, so a service is waited for only by id, and
--all says how many it left out. --all says how many jobs it waited for and
counts only those: jobs that had already ended when it was called are not
counted ("waited for 968 batch jobs active at the call: 968 succeeded"). It
rides out a server restart or failover (see --server): when no server answers
it says so and asks again, 1 s apart and doubling to 5 s; it gives up after 2
minutes without an answer (or at --timeout), with one line and exit 124 too,
the jobs perhaps still running. A refusal (an unknown id, a bad token) ends
it at once.`

func runWait(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("wait", waitUsage)
	cf := m.addClientFlags(fs, true)
	cf.formats = []string{"table", "json"}
	all := fs.Bool("all", false, "wait for every batch job active now (not services)")
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
	report := waitReport{summary: m.Stdout, asJSON: cf.output == "json"}
	return m.waitFor(ctx, m.retryingClient(cf), ids, *all, timeout, report)
}

// waitReport is where waitFor reports the outcome: the WaitResult as JSON
// on stdout, or a summary line on summary.
type waitReport struct {
	summary io.Writer
	asJSON  bool
}

// waitFor waits and reports: exit 0 when every job succeeded, 1 when any
// failed or was cancelled, 124 on timeout or when no server answered for
// the client's Retry.For.
func (m *Main) waitFor(ctx context.Context, c *client.Client, ids []string, all bool, timeout time.Duration, report waitReport) error {
	res, err := c.Wait(ctx, ids, all, timeout)
	if err != nil {
		return gaveUp(err, "the jobs may still be running")
	}
	if report.asJSON {
		if err := printJSON(m.Stdout, res); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(report.summary, waitSummary(res, all))
	}
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

// waitSummary is the line berth wait prints for people, such as
// "9 succeeded, 1 failed"; with all it begins with how many jobs were
// waited for, those active at the call, which the counts add up to:
// "waited for 10 batch jobs active at the call: 9 succeeded, 1 failed".
func waitSummary(res *berth.WaitResult, all bool) string {
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
		what := "jobs"
		if all {
			what = "batch jobs"
		}
		parts = append(parts, "no "+what+" to wait for")
	}
	if res.Services > 0 {
		parts = append(parts, berth.Count(res.Services, "service")+" not waited for")
	}
	line := strings.Join(parts, ", ")
	if all && res.Total > 0 {
		noun := "jobs"
		if res.Total == 1 {
			noun = "job"
		}
		line = fmt.Sprintf("waited for %d batch %s active at the call: %s", res.Total, noun, line)
	}
	return line
}

// retryingClient returns the client of cf's server for a command that
// rides out a server restart or failover (berth wait, berth logs -f): it
// says on m.Stderr, once an outage begins, that it is trying again.
func (m *Main) retryingClient(cf *clientFlags) *client.Client {
	c := m.client(cf)
	c.Retry.Notify = func(err error) {
		fmt.Fprintf(m.Stderr, "berth: %v; trying again for up to %s\n", err, client.DefaultRetryFor)
	}
	return c
}

// gaveUp turns a client's giving up for want of a server into exit 124
// with one line ending in hint; other errors it returns as they are.
func gaveUp(err error, hint string) error {
	var oe *client.OutageError
	if errors.As(err, &oe) {
		return &exitError{code: exitTimeout, msg: oe.Error() + "; " + hint}
	}
	return err
}
