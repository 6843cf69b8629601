package main

import (
	"context"
	"fmt"

	"github.com/berth-dev/berth"
)

func runCancel(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("cancel", "ID...")
	cf := m.addClientFlags(fs, true)
	ids, err := parseIDs(fs, cf, args, "give at least one job id")
	if err != nil {
		return err
	}
	c := m.client(cf)
	failed := 0
	cancelled := []*berth.Job{} // for -o json: an array, never null
	for _, id := range ids {
		j, err := c.Cancel(ctx, id)
		if err != nil && len(ids) == 1 {
			return err // printed as the one line of any error
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
