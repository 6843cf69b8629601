package main

import (
	"context"

	"github.com/berth-dev/berth"
)

func runLogs(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("logs", "[-f] ID")
	cf := m.addClientFlags(fs, false)
	follow := fs.Bool("f", false, "follow the output until the job ends")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return berth.Invalidf("id", "give exactly one job id")
	}
	err := m.client(cf).Logs(ctx, fs.Arg(0), *follow, m.Stdout)
	if ctx.Err() != nil {
		return nil // interrupted while following
	}
	return err
}
