package main

import (
	"context"
	"fmt"

	"github.com/berth-dev/berth"
)

func runCancel(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("cancel", "ID...")
	cf := m.addClientFlags(fs, false)
	ids, err := parseIDs(fs, cf, args, "give at least one job id")
	if err != nil {
		return err
	}
	c := m.client(cf)
	failed := 0
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
		if j.State == berth.JobCancelled {
			fmt.Fprintf(m.Stdout, "%s cancelled\n", id)
		} else {
			fmt.Fprintf(m.Stdout, "%s stopping (SIGTERM sent; SIGKILL after the grace period)\n", id)
		}
	}
	if failed > 0 {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("%d of %d cancels failed", failed, len(ids))}
	}
	return nil
}
