package main

import "context"

// logsUsage is berth logs' help text before its flags.
const logsUsage = `[-f] ID

Prints the job's output, every attempt in order. With -f it follows the
output until the job ends, riding out a server restart or failover (see
--server): when no server answers it says so, asks again (1 s apart and
doubling to 5 s) and goes on after the last byte it printed; it gives up
after 2 minutes without an answer, with one line and exit 124. A refusal (an
unknown id, a bad token) ends it at once.`

func runLogs(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("logs", logsUsage)
	cf := m.addClientFlags(fs, false)
	follow := fs.Bool("f", false, "follow the output until the job ends")
	id, err := parseOneArg(fs, cf, args, "id", "give exactly one job id")
	if err != nil {
		return err
	}
	err = m.retryingClient(cf).Logs(ctx, id, *follow, m.Stdout)
	if ctx.Err() != nil {
		return nil // interrupted while following
	}
	return gaveUp(err, "the job may still be running")
}
