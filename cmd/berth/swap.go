package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/berth-dev/berth"
)

func runSwap(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("swap", "[flags] MODEL_KEY")
	cf := m.addClientFlags(fs, true)
	cf.formats = []string{"table", "json"}
	dryRun := fs.Bool("dry-run", false, "check the swap and say what it would do; touch nothing")
	validate := fs.Bool("validate", false, "only check whether a swap to MODEL_KEY could start now")
	token := fs.String("token", m.Getenv("BERTH_SWAP_LOCK_TOKEN"), "the swap lock's token, when you hold the lock (default $BERTH_SWAP_LOCK_TOKEN)")
	wait := fs.Bool("wait", true, "wait until the new model is ready or the swap failed; exit 1 if it failed")
	key, err := parseOneArg(fs, cf, args, "model_key", "give the MODEL_KEY of a catalog entry (GET /api/v1/catalog)")
	if err != nil {
		return err
	}
	c := m.client(cf)
	if *validate {
		v, err := c.ValidateSwap(ctx, key)
		if err != nil {
			return err
		}
		if cf.output == "json" {
			return printJSON(m.Stdout, v)
		}
		if !v.OK {
			return &exitError{code: exitFailed, msg: fmt.Sprintf("swap to %s cannot start: %v", key, v.Problems)}
		}
		fmt.Fprintf(m.Stdout, "swap to %s can start on pool %s (%v)\n", key, v.Pool, v.Workers)
		return nil
	}
	sw, err := c.Swap(ctx, berth.SwapRequest{ModelKey: key, DryRun: *dryRun}, *token)
	if err != nil {
		return err
	}
	for *wait && !*dryRun && sw.State != berth.SwapStateReady && sw.State != berth.SwapStateFailed {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		if sw, err = c.GetSwap(ctx, sw.ID); err != nil {
			return err
		}
	}
	switch {
	case cf.output == "json":
		if err := printJSON(m.Stdout, sw); err != nil {
			return err
		}
	case sw.DryRun:
		fmt.Fprintln(m.Stdout, dryRunSummary(sw))
	default:
		fmt.Fprintf(m.Stdout, "swap %s to %s on pool %s: %s%s\n", sw.ID, sw.ModelKey, sw.Pool, sw.State, orNone(": ", sw.Reason))
	}
	if sw.State == berth.SwapStateFailed {
		return &exitError{code: exitFailed}
	}
	return nil
}

// dryRunSummary says what the server answered a dry run: whether the swap
// could start, and what it would stop, or why it could not start.
func dryRunSummary(sw *berth.Swap) string {
	if sw.State == berth.SwapStateFailed {
		return fmt.Sprintf("dry run: a swap to %s on pool %s would fail: %s (nothing was changed)", sw.ModelKey, sw.Pool, sw.Reason)
	}
	stop := "nothing"
	if len(sw.Stopped) > 0 {
		stop = strings.Join(sw.Stopped, ", ")
	}
	return fmt.Sprintf("dry run: a swap to %s on pool %s can start; it would stop %s and start %s (nothing was changed)",
		sw.ModelKey, sw.Pool, stop, sw.ModelKey)
}

// orNone is prefix+s, or "" when s is empty.
func orNone(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}
