package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/berth-dev/berth"
)

// lockTokenEnv is where berth lock reads a lock token not given with
// --token.
const lockTokenEnv = "BERTH_SWAP_LOCK_TOKEN"

// lockCommands are the subcommands of berth lock.
var lockCommands = subcommands{
	name: "lock",
	help: `Usage: berth lock acquire|status|release [flags]

The swap reservation lock (Spark Control's /api/swap/lock): while it is
held, a model swap without its token is refused (423 Locked). It expires by
itself after its TTL.

  berth lock acquire --holder H [--ttl 900] [--note N]   prints the token
  berth lock acquire --holder H --token T [--ttl S]      extends H's lock
  berth lock status [-o json]
  berth lock release [--token T | --force]

--token defaults to $` + lockTokenEnv + `. Run berth lock SUBCOMMAND -h for its flags.
`,
	run: map[string]func(ctx context.Context, m *Main, args []string) error{
		"acquire": runLockAcquire,
		"status":  runLockStatus,
		"release": runLockRelease,
	},
}

func runLock(ctx context.Context, m *Main, args []string) error {
	return lockCommands.dispatch(ctx, m, args)
}

// parseTTL reads --ttl: seconds (900) or a duration (15m), more than 0.
func parseTTL(s string) (float64, error) {
	secs, err := strconv.ParseFloat(s, 64)
	if err != nil {
		d, derr := time.ParseDuration(s)
		if derr != nil {
			return 0, berth.Invalidf("--ttl", "%q is neither seconds (900) nor a duration (15m)", s)
		}
		secs = d.Seconds()
	}
	if !(secs > 0) || secs > berth.MaxSwapLockTTL.Seconds() {
		return 0, berth.Invalidf("--ttl", "must be more than 0 and at most %d seconds (24h)", int(berth.MaxSwapLockTTL.Seconds()))
	}
	return secs, nil
}

func runLockAcquire(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("lock acquire", "--holder H [--ttl 900] [--note N] [--token T]")
	cf := m.addClientFlags(fs, true)
	holder := fs.String("holder", "", "who holds the lock (descriptive; required)")
	ttl := fs.String("ttl", "900", "how long the lock lasts: seconds or a duration such as 15m (the server clamps to 1s–24h)")
	note := fs.String("note", "", "why the lock is held, shown to others")
	token := fs.String("token", m.Getenv(lockTokenEnv), "the token of the lock holder already holds, to extend it (default $"+lockTokenEnv+")")
	if err := parseNoArgs(fs, cf, args, "lock acquire"); err != nil {
		return err
	}
	if *holder == "" {
		return berth.Invalidf("--holder", "is required: who holds the lock, e.g. --holder nightly-eval")
	}
	secs, err := parseTTL(*ttl)
	if err != nil {
		return err
	}
	st, err := m.client(cf).AcquireSwapLock(ctx, berth.SwapLockRequest{Holder: *holder, TTLSeconds: &secs, Note: *note, Token: *token})
	if err != nil {
		return err
	}
	if cf.output != "table" {
		return printData(m.Stdout, cf.output, st)
	}
	// The token alone on stdout, for TOKEN=$(berth lock acquire ...).
	fmt.Fprintln(m.Stdout, st.Token)
	fmt.Fprintf(m.Stderr, "swap lock held by %s until %s (%ds)\n", st.Holder, berth.FormatSparkTime(st.ExpiresAt), st.SecondsRemaining)
	return nil
}

func runLockStatus(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("lock status", "[flags]")
	cf := m.addClientFlags(fs, true)
	if err := parseNoArgs(fs, cf, args, "lock status"); err != nil {
		return err
	}
	st, err := m.client(cf).SwapLock(ctx)
	if err != nil {
		return err
	}
	if cf.output != "table" {
		return printData(m.Stdout, cf.output, st)
	}
	if !st.Held {
		fmt.Fprintln(m.Stdout, "not held")
		return nil
	}
	fmt.Fprintf(m.Stdout, "held by %s until %s (%ds left)\n", st.Holder, berth.FormatSparkTime(st.ExpiresAt), st.SecondsRemaining)
	if st.Note != "" {
		fmt.Fprintf(m.Stdout, "note: %s\n", st.Note)
	}
	return nil
}

func runLockRelease(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("lock release", "[--token T | --force]")
	cf := m.addClientFlags(fs, true)
	token := fs.String("token", m.Getenv(lockTokenEnv), "the lock's token (default $"+lockTokenEnv+")")
	force := fs.Bool("force", false, "release whoever holds it, without the token (the human override)")
	if err := parseNoArgs(fs, cf, args, "lock release"); err != nil {
		return err
	}
	if *force {
		*token = ""
	} else if *token == "" {
		return berth.Invalidf("--token", "give the lock's token (--token or $%s), or --force to override the holder", lockTokenEnv)
	}
	out, err := m.client(cf).ReleaseSwapLock(ctx, *token, *force)
	if err != nil {
		return err
	}
	if cf.output != "table" {
		return printData(m.Stdout, cf.output, out)
	}
	if out.Released {
		fmt.Fprintln(m.Stdout, "released")
	} else {
		fmt.Fprintln(m.Stdout, "not held")
	}
	return nil
}
