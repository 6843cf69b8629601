package main

import (
	"context"
	"slices"

	"github.com/berth-dev/berth"
)

// execUsage is berth exec's help text before its flags.
const execUsage = `[--rank N] ID -- CMD [ARGS...]

Runs CMD in running job ID: on its worker, through the server, with the
job's environment (its env, its secrets, BERTH_JOB_ID and the other BERTH_
variables) and in its working directory. The command's stdout and stderr
come back to berth's, berth's stdin goes to the command, and berth exits
with the command's exit code. --rank picks the member of a gang. Allowed to
whoever may cancel the job.`

func runExec(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("exec", execUsage)
	cf := m.addClientFlags(fs, false)
	rank := fs.Int("rank", 0, "the member of a gang to run in, from 0")
	var argv []string
	if i := slices.Index(args, "--"); i >= 0 {
		args, argv = args[:i], args[i+1:]
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	if len(pos) == 0 {
		return berth.Invalidf("id", "give the id of a running job, then -- and the command")
	}
	id := pos[0]
	if argv == nil {
		argv = pos[1:]
	} else if len(pos) > 1 {
		return berth.Invalidf("id", "give one job id before --, got %q", pos)
	}
	switch {
	case len(argv) == 0 || argv[0] == "":
		return berth.Invalidf("command", "give the command to run after --")
	case *rank < 0:
		return berth.Invalidf("--rank", "must be 0 or more, not %d", *rank)
	}
	code, err := m.client(cf).Exec(ctx, id, *rank, argv, m.Stdin, m.Stdout, m.Stderr)
	if err != nil {
		return err
	}
	if code != 0 {
		return &exitError{code: code}
	}
	return nil
}
