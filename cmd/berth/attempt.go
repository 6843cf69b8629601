package main

import (
	"context"
	"fmt"

	"github.com/berth-dev/berth"
)

// attemptCommands are the subcommands of berth attempt.
var attemptCommands = subcommands{
	name: "attempt",
	help: `Usage: berth attempt check [ID]

Checks, before an external side effect, that attempt ID (default
$BERTH_ATTEMPT_ID, which every job has) is still its job's live attempt on
a worker whose lease has not lapsed: no other attempt of the job can have
started. Exits 0 when it is, 1 with the reason when it is not, 2 when it
could not check (treat that as not valid). See docs/worker-control.md.
`,
	run: map[string]func(ctx context.Context, m *Main, args []string) error{
		"check": runAttemptCheck,
	},
}

func runAttempt(ctx context.Context, m *Main, args []string) error {
	return attemptCommands.dispatch(ctx, m, args)
}

func runAttemptCheck(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("attempt check", "[ID]  (default $BERTH_ATTEMPT_ID)")
	cf := m.addClientFlags(fs, false)
	ids, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	var id string
	switch len(ids) {
	case 0:
		if id = m.Getenv("BERTH_ATTEMPT_ID"); id == "" {
			return berth.Invalidf("id", "give an attempt id, or run inside a job ($BERTH_ATTEMPT_ID is unset)")
		}
	case 1:
		id = ids[0]
	default:
		return berth.Invalidf("id", "give one attempt id, got %d", len(ids))
	}
	v, err := m.client(cf).AttemptValidity(ctx, id)
	if err != nil {
		return err
	}
	if !v.Valid {
		return &exitError{code: exitFailed, msg: fmt.Sprintf("attempt %s is not valid: %s", v.AttemptID, v.Reason)}
	}
	fmt.Fprintf(m.Stdout, "attempt %s of job %s is valid\n", v.AttemptID, v.JobID)
	return nil
}
