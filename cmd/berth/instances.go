package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/berth-dev/berth"
	"golang.org/x/crypto/ssh"
)

func runInstances(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("instances", "[flags]")
	cf := m.addClientFlags(fs, true)
	pool := fs.String("pool", "", "only this pool's instances")
	live := fs.Bool("live", false, "only the live instances (not yet given back)")
	if err := parseNoArgs(fs, cf, args, "berth instances"); err != nil {
		return err
	}
	list, err := m.client(cf).Instances(ctx, *pool, *live)
	if err != nil {
		return err
	}
	return printList(m.Stdout, cf.output, list, func() error {
		now := time.Now()
		t := newTable(m.Stdout, "ID", "POOL", "OFFER", "MACHINE", "PHASE", "AGE", "$/h", "SPENT", "ENDPOINT", "LAST-FAILURE")
		for _, in := range list {
			t.row(in.ID, in.Pool, idOrDash(in.OfferID), idOrDash(in.MachineID), string(in.Phase), ago(in.CreatedAt, now),
				strconv.FormatFloat(in.PricePerH, 'f', 3, 64), "$"+strconv.FormatFloat(in.Spent(now), 'f', 2, 64),
				orDash(in.Endpoint), orDash(truncate(failureLine(in), 50)))
		}
		return t.flush()
	})
}

// idOrDash writes a marketplace id, or - before there is one.
func idOrDash(id int64) string {
	if id == 0 {
		return "-"
	}
	return strconv.FormatInt(id, 10)
}

func runInstance(ctx context.Context, m *Main, args []string) error {
	if rest := args[len(m.globals):]; len(rest) > 0 && rest[0] == "rm" {
		return runInstanceRm(ctx, m, m.withGlobals(rest[1:]))
	}
	fs := m.flagSet("instance", "[flags] ID | rm ID")
	cf := m.addClientFlags(fs, true)
	id, err := parseOneArg(fs, cf, args, "id", "give exactly one instance ID (berth instances lists them)")
	if err != nil {
		return err
	}
	in, err := m.client(cf).Instance(ctx, id)
	if err != nil {
		return err
	}
	if cf.output != "table" {
		return printData(m.Stdout, cf.output, in)
	}
	printInstance(m.Stdout, in, time.Now())
	return nil
}

// printInstance writes instance in: its fields (its pinned SSH host key
// by fingerprint), then its phase timeline
// and, in time order among it, each probe with its command, exit code and
// output.
func printInstance(w io.Writer, in *berth.Instance, now time.Time) {
	fmt.Fprintf(w, "ID:        %s\n", in.ID)
	fmt.Fprintf(w, "Pool:      %s\n", in.Pool)
	fmt.Fprintf(w, "Phase:     %s\n", in.Phase)
	if line := failureLine(in); line != "" {
		fmt.Fprintf(w, "Failure:   %s\n", line)
	}
	fmt.Fprintf(w, "Contract:  %s (offer %s, machine %s)\n", idOrDash(in.ProviderID), idOrDash(in.OfferID), idOrDash(in.MachineID))
	if in.GPUName != "" {
		fmt.Fprintf(w, "GPUs:      %d× %s\n", in.GPUs, in.GPUName)
	}
	fmt.Fprintf(w, "Price:     $%s, spent $%s\n", formatPrice(in.PricePerH), strconv.FormatFloat(in.Spent(now), 'f', 2, 64))
	if in.SSHAddr != "" {
		fmt.Fprintf(w, "SSH:       %s\n", in.SSHAddr)
	}
	if in.HostKey != "" {
		fmt.Fprintf(w, "Host key:  %s (pinned)\n", hostKeyFingerprint(in.HostKey))
	}
	if in.WorkerHost != "" {
		fmt.Fprintf(w, "Worker:    %s\n", in.WorkerHost)
	}
	if in.Endpoint != "" {
		fmt.Fprintf(w, "Endpoint:  %s\n", in.Endpoint)
	}
	fmt.Fprintf(w, "Created:   %s (%s ago)\n", in.CreatedAt.Format(time.RFC3339), ago(in.CreatedAt, now))
	if !in.ReadyAt.IsZero() {
		fmt.Fprintf(w, "Ready:     %s (after %s)\n", in.ReadyAt.Format(time.RFC3339), in.ReadyAt.Sub(in.CreatedAt).Round(time.Second))
	}
	if !in.EndedAt.IsZero() {
		fmt.Fprintf(w, "Ended:     %s\n", in.EndedAt.Format(time.RFC3339))
	}
	if lines := timelineLines(in, 0, 0); len(lines) > 0 {
		fmt.Fprintln(w, "Timeline:")
		for _, l := range lines {
			fmt.Fprint(w, l)
		}
	}
}

// hostKeyFingerprint writes an SSH host key (authorized_keys format) as
// ssh-keygen -l does: its SHA256 fingerprint and its type; a key it cannot
// read, as it is.
func hostKeyFingerprint(key string) string {
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(key))
	if err != nil {
		return key
	}
	return ssh.FingerprintSHA256(pub) + " " + pub.Type()
}

// timelineLines are in's phase changes from the tl-th and probes from the
// pr-th, in time order, each as its line: a probe's command, when it has
// several lines (the GPU check), goes on further lines indented under its
// first, and its output on further lines after it.
func timelineLines(in *berth.Instance, tl, pr int) []string {
	type entry struct {
		at    time.Time
		order int
		text  string
	}
	var entries []entry
	for i, pc := range in.Timeline[min(tl, len(in.Timeline)):] {
		entries = append(entries, entry{pc.At, i, fmt.Sprintf("  %s  %-9s %s\n", offset(pc.At, in.CreatedAt), pc.Phase, pc.Reason)})
	}
	for i, p := range in.Probes[min(pr, len(in.Probes)):] {
		exit := "no exit code"
		if p.ExitCode != nil {
			exit = "exit " + strconv.Itoa(*p.ExitCode)
		}
		verdict := "ok"
		if p.Class != "" {
			verdict = p.Class
		}
		head := fmt.Sprintf("  %s    probe %s: ", offset(p.At, in.CreatedAt), p.Phase)
		cmd := strings.Split(strings.TrimRight(p.Command, "\n"), "\n")
		text := head + strings.Join(cmd, "\n"+strings.Repeat(" ", utf8.RuneCountInString(head))) + fmt.Sprintf(" (%s, %s)\n", exit, verdict)
		for _, l := range strings.Split(strings.TrimRight(p.Output, "\n"), "\n") {
			if l != "" {
				text += fmt.Sprintf("               | %s\n", l)
			}
		}
		entries = append(entries, entry{p.At, len(in.Timeline) + i, text})
	}
	sort.SliceStable(entries, func(i, j int) bool {
		if !entries[i].at.Equal(entries[j].at) {
			return entries[i].at.Before(entries[j].at)
		}
		return entries[i].order < entries[j].order
	})
	lines := make([]string, len(entries))
	for i, e := range entries {
		lines[i] = e.text
	}
	return lines
}

// offset writes how long after start at came, as +12.3s.
func offset(at, start time.Time) string {
	if start.IsZero() || at.Before(start) {
		return fmt.Sprintf("%8s", at.Format("15:04:05"))
	}
	return fmt.Sprintf("%8s", "+"+at.Sub(start).Round(100*time.Millisecond).String())
}

// hostCommands are the subcommands of berth hosts.
var hostCommands = subcommands{
	name: "hosts",
	help: `Usage: berth hosts list|block|unblock|clear [flags] [MACHINE]

Berth remembers each marketplace machine its pools rented: successes,
failures by class, when it was last seen, and whether it is quarantined
(after a failure that was the host's fault) or blocked by hand. Pools
prefer machines with a good history and never rent a quarantined or
blocked one (docs/pools.md). Operators and admins.

  berth hosts list [-o json|yaml]
  berth hosts block MACHINE       no pool rents it until unblocked
  berth hosts unblock MACHINE     lift the block and any quarantine
  berth hosts clear               forget every host record

Each takes --provider (default vast).
`,
	run: map[string]func(ctx context.Context, m *Main, args []string) error{
		"list":    runHostsList,
		"block":   func(ctx context.Context, m *Main, args []string) error { return runHostBlock(ctx, m, args, true) },
		"unblock": func(ctx context.Context, m *Main, args []string) error { return runHostBlock(ctx, m, args, false) },
		"clear":   runHostsClear,
	},
}

func runHosts(ctx context.Context, m *Main, args []string) error {
	return hostCommands.dispatch(ctx, m, args)
}

func runHostsList(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("hosts list", "[flags]")
	cf := m.addClientFlags(fs, true)
	provider := fs.String("provider", berth.ProviderVast, "the marketplace")
	if err := parseNoArgs(fs, cf, args, "berth hosts list"); err != nil {
		return err
	}
	list, err := m.client(cf).Hosts(ctx, *provider)
	if err != nil {
		return err
	}
	return printList(m.Stdout, cf.output, list, func() error {
		now := time.Now()
		t := newTable(m.Stdout, "MACHINE", "GPU", "OK", "FAILURES", "LAST-SEEN", "STATE", "LAST-FAILURE")
		for _, h := range list {
			t.row(strconv.FormatInt(h.MachineID, 10), orDash(h.GPUName), strconv.Itoa(h.Successes),
				orDash(failureCounts(h.Failures)), ago(h.LastSeen, now), hostState(h, now), orDash(truncate(h.LastFailure, 50)))
		}
		return t.flush()
	})
}

// failureCounts writes failures by class, class=N, sorted by class.
func failureCounts(f map[string]int) string {
	var parts []string
	for class, n := range f {
		parts = append(parts, class+"="+strconv.Itoa(n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// hostState says whether h may be rented: blocked, quarantined (for how
// long yet) or ok.
func hostState(h *berth.HostRecord, now time.Time) string {
	switch {
	case h.Blocked:
		return "blocked"
	case h.QuarantinedUntil.After(now):
		return "quarantined(" + h.QuarantinedUntil.Sub(now).Round(time.Second).String() + ")"
	}
	return "ok"
}

func runHostBlock(ctx context.Context, m *Main, args []string, block bool) error {
	verb := "unblock"
	if block {
		verb = "block"
	}
	fs := m.flagSet("hosts "+verb, "[flags] MACHINE")
	cf := m.addClientFlags(fs, true)
	provider := fs.String("provider", berth.ProviderVast, "the marketplace")
	arg, err := parseOneArg(fs, cf, args, "MACHINE", "give exactly one MACHINE id (berth hosts list shows them)")
	if err != nil {
		return err
	}
	machine, err := strconv.ParseInt(arg, 10, 64)
	if err != nil || machine <= 0 {
		return berth.Invalidf("MACHINE", "%q: must be the marketplace's machine id, a whole number", arg)
	}
	h, err := m.client(cf).BlockHost(ctx, *provider, machine, block)
	if err != nil {
		return err
	}
	if cf.output != "table" {
		return printData(m.Stdout, cf.output, h)
	}
	fmt.Fprintf(m.Stdout, "machine %d %sed\n", machine, verb)
	return nil
}

func runHostsClear(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("hosts clear", "[flags]")
	cf := m.addClientFlags(fs, false)
	provider := fs.String("provider", berth.ProviderVast, "the marketplace")
	if err := parseNoArgs(fs, cf, args, "berth hosts clear"); err != nil {
		return err
	}
	n, err := m.client(cf).ClearHosts(ctx, *provider)
	if err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "%d host records of %s cleared\n", n, *provider)
	return nil
}

// runInstanceRm gives a ready instance back (a bare vLLM node, which
// nothing else gives back): destroyed at the marketplace, its machine not
// blamed.
func runInstanceRm(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("instance rm", "[flags] ID")
	cf := m.addClientFlags(fs, false)
	id, err := parseOneArg(fs, cf, args, "id", "give exactly one instance ID (berth instances lists them)")
	if err != nil {
		return err
	}
	in, err := m.client(cf).DestroyInstance(ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "instance %s %s\n", in.ID, in.Phase)
	return nil
}
