package main

import (
	"context"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
)

// logsUsage is berth logs' help text before its flags.
const logsUsage = `[-f] [--attempt N] ID

Prints the job's output, every attempt in order, each after the first under
a header line "==> attempt 2 on HOST (ID) <=="; a gang's members each under
one naming their rank. --attempt N prints the N-th attempt alone, without a
header (a gang's members keep theirs). With -f it follows the output until
the job (or that attempt) ends, riding out a server restart or failover (see
--server): when no server answers it says so, asks again (1 s apart and
doubling to 5 s) and goes on after the last byte it printed; it gives up
after 2 minutes without an answer, with one line and exit 124. A refusal (an
unknown id, a bad token) ends it at once.`

func runLogs(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("logs", logsUsage)
	cf := m.addClientFlags(fs, false)
	var opts client.LogOptions
	fs.BoolVar(&opts.Follow, "f", false, "follow the output until the job (or the --attempt) ends")
	fs.IntVar(&opts.Attempt, "attempt", 0, "print the N-th attempt's output alone (1 for the first); 0: every attempt's")
	id, err := parseOneArg(fs, cf, args, "id", "give exactly one job id")
	if err != nil {
		return err
	}
	if opts.Attempt < 0 {
		return berth.Invalidf("--attempt", "must be a whole number ≥ 0 (1 for the first attempt, 0 for all)")
	}
	err = m.retryingClient(cf).Logs(ctx, id, opts, m.Stdout)
	return gaveUp(err, "the job may still be running")
}
