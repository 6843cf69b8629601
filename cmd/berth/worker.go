package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/berth-dev/berth"
)

// workerCommands are the subcommands of berth worker.
var workerCommands = subcommands{
	name: "worker",
	help: `Usage: berth worker on|off [flags] HOST

Turns a host's workers on or off, for one queue (--queue) or every queue.
The desired state is kept by the server: an off host stays off while its
agents are away and across restarts, and an agent that starts on it comes
up parked. Turning it on resumes it in place.

  berth worker off HOST [--queue Q] [--policy hard|drain|pause] [--by NAME]
  berth worker on HOST [--queue Q] [--by NAME]

Policies (how an off treats running attempts):
  hard   stop them now (SIGTERM, grace, SIGKILL), requeue them at the front
         of their priority class without spending a retry, then park
  drain  take nothing new, let them finish, then park
  pause  take nothing new, keep them (and warm models) running

Run berth worker on -h or berth worker off -h for the flags.
`,
	run: map[string]func(ctx context.Context, m *Main, args []string) error{
		"on": func(ctx context.Context, m *Main, args []string) error {
			return runWorkerSet(ctx, m, berth.DesiredOn, args)
		},
		"off": func(ctx context.Context, m *Main, args []string) error {
			return runWorkerSet(ctx, m, berth.DesiredOff, args)
		},
	},
}

func runWorker(ctx context.Context, m *Main, args []string) error {
	return workerCommands.dispatch(ctx, m, args)
}

func runWorkerSet(ctx context.Context, m *Main, desired string, args []string) error {
	fs := m.flagSet("worker "+desired, "[flags] HOST")
	cf := m.addClientFlags(fs, true)
	queue := fs.String("queue", "", "only this queue (default: every queue of the host)")
	policy := fs.String("policy", "", "how an off treats running attempts: hard (default), drain or pause")
	by := fs.String("by", m.Getenv("USER"), "who asks (recorded with the change and its events)")
	hosts, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	if len(hosts) != 1 {
		return berth.Invalidf("host", "give exactly one HOST, e.g. berth worker %s gpu-box-1", desired)
	}
	host := hosts[0]
	if err := berth.ValidHost("host", host); err != nil {
		return err
	}
	req := berth.ControlRequest{Queue: *queue, DesiredState: desired, StopPolicy: *policy, RequestedBy: *by}
	if desired == berth.DesiredOn && *policy != "" {
		return berth.Invalidf("--policy", "only berth worker off takes a stop policy")
	}
	resp, err := m.client(cf).SetWorkerControl(ctx, host, req)
	if err != nil {
		return err
	}
	if cf.output != "table" {
		return printData(m.Stdout, cf.output, resp)
	}
	what := "every queue of " + host
	if *queue != "" {
		what = "queue " + *queue + " of " + host
	}
	fmt.Fprintf(m.Stdout, "%s: %s", what, desired)
	if desired == berth.DesiredOff {
		fmt.Fprintf(m.Stdout, " (%s)", resp.Controls[0].StopPolicy)
	}
	fmt.Fprintln(m.Stdout)
	if len(resp.Stopping) > 0 {
		fmt.Fprintf(m.Stdout, "stopping %d attempt(s), to be requeued: %s\n", len(resp.Stopping), strings.Join(resp.Stopping, " "))
	}
	if resp.Workers == 0 {
		fmt.Fprintf(m.Stderr, "berth: warning: no worker with host %q has registered (see berth workers); an agent joining as %s will take this setting\n", host, host)
	}
	return nil
}

// desiredSummary describes a worker's controls for berth workers: "on",
// "off (hard)", or per queue, e.g. "gpu:off(drain)". A queue turned back
// on while the whole host is on is the default again, and not shown.
func desiredSummary(w *berth.Worker) string {
	hostOff := slices.ContainsFunc(w.Controls, func(c *berth.WorkerControl) bool { return c.Queue == berth.AllQueues && c.Off() })
	var parts []string
	for _, c := range w.Controls {
		switch {
		case c.Queue == berth.AllQueues && c.Off():
			parts = append([]string{"off (" + c.StopPolicy + ")"}, parts...)
		case c.Queue == berth.AllQueues:
		case c.Off():
			parts = append(parts, c.Queue+":off("+c.StopPolicy+")")
		case hostOff:
			parts = append(parts, c.Queue+":on")
		}
	}
	if len(parts) == 0 {
		return "on"
	}
	return strings.Join(parts, " ")
}
