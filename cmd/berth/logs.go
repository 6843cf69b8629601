package main

import "context"

func runLogs(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("logs", "[-f] ID")
	cf := m.addClientFlags(fs, false)
	follow := fs.Bool("f", false, "follow the output until the job ends")
	id, err := parseOneArg(fs, cf, args, "id", "give exactly one job id")
	if err != nil {
		return err
	}
	err = m.client(cf).Logs(ctx, id, *follow, m.Stdout)
	if ctx.Err() != nil {
		return nil // interrupted while following
	}
	return err
}
