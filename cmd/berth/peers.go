package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth"
)

// peerCommands are the subcommands of berth peer.
var peerCommands = subcommands{
	name: "peer",
	help: `Usage: berth peer add|rm [flags] NAME

A federation peer is another Berth cluster this one may hand whole jobs to:
those no local worker could ever run, or those submitted with --cluster
NAME. On the peer, an admin mints this cluster's credential with
berth token create --role peer --name NAME-OF-THIS-CLUSTER > FILE.

  berth peer add NAME --url https://HOST:PORT --token-file FILE [--ca-fingerprint sha256:HEX]
                      [--route-timeout 1m] [--lost-timeout 1h]
  berth peer rm NAME [--force]
  berth peers [-o wide|json|yaml]

add on a peer that exists changes it (without --token-file it keeps its
token). rm is refused while the peer holds active jobs, unless --force.
`,
	run: map[string]func(ctx context.Context, m *Main, args []string) error{
		"add": runPeerAdd,
		"rm":  runPeerRm,
	},
}

func runPeer(ctx context.Context, m *Main, args []string) error {
	return peerCommands.dispatch(ctx, m, args)
}

// peerFlags name the flags of berth peer add after the peer's fields
// they set, for the server's errors.
var peerFlags = map[string]string{
	"name": "NAME", "url": "--url", "token": "--token-file", "ca_fingerprint": "--ca-fingerprint",
	"route_timeout": "--route-timeout", "lost_timeout": "--lost-timeout",
}

// textValue is a string flag.
type textValue string

func (v *textValue) String() string     { return string(*v) }
func (v *textValue) Set(s string) error { *v = textValue(s); return nil }

func runPeerAdd(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("peer add", "[flags] NAME --url URL --token-file FILE")
	cf := m.addClientFlags(fs, true)
	// After the command, --ca-fingerprint pins the peer's certificate; the
	// client's own pin for its server comes from $BERTH_CA_FINGERPRINT,
	// --ca or what berth up saved.
	if slices.ContainsFunc(m.globals, func(a string) bool { return strings.HasPrefix(strings.TrimLeft(a, "-"), "ca-fingerprint") }) {
		return berth.Invalidf("--ca-fingerprint", "before peer add it is ambiguous: give the peer's after the command, and this server's in $BERTH_CA_FINGERPRINT")
	}
	var pin textValue
	f := fs.Lookup("ca-fingerprint")
	f.Value, f.DefValue = &pin, ""
	f.Usage = "pin the peer's certificate or CA: `sha256:HEX`, as berth server prints it on the peer (default: the system's roots)"
	url := fs.String("url", "", "the peer's API, https://HOST:PORT")
	tokenFile := fs.String("token-file", "", "file holding the token of role peer minted on the peer (required to add; without it a change keeps the token)")
	var route, lost time.Duration
	durationVar(fs, &route, "route-timeout", 0, "how long the peer may go unheard before no new work goes to it, a `duration` (default 1m)")
	durationVar(fs, &lost, "lost-timeout", 0, "how long the peer may go unheard before its jobs are declared lost and routed again, a `duration` (default 1h)")
	name, err := parseOneArg(fs, cf, args, "NAME", "give exactly one peer NAME, e.g. berth peer add b --url https://b.example:7070 --token-file b.token")
	if err != nil {
		return err
	}
	p := &berth.Peer{Name: name, URL: *url, CAFingerprint: string(pin), RouteTimeout: berth.Duration(route), LostTimeout: berth.Duration(lost)}
	if *tokenFile != "" {
		data, err := os.ReadFile(*tokenFile)
		if err != nil {
			return berth.Invalidf("--token-file", "read the peer's token").WithCause(err)
		}
		if p.Token = strings.TrimSpace(string(data)); p.Token == "" {
			return berth.Invalidf("--token-file", "%s is empty: it should hold the token berth token create --role peer printed on the peer", *tokenFile)
		}
	}
	info, err := m.client(cf).PutPeer(ctx, p)
	if e := (*berth.Error)(nil); errors.As(err, &e) && peerFlags[e.Field] != "" {
		e.Field = peerFlags[e.Field]
	}
	if err != nil {
		return err
	}
	if cf.output != "table" {
		return printData(m.Stdout, cf.output, info)
	}
	fmt.Fprintf(m.Stdout, "peer %s: %s (route timeout %s, lost timeout %s)\n", info.Name, info.URL,
		time.Duration(info.RouteTimeout), time.Duration(info.LostTimeout))
	return nil
}

func runPeerRm(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("peer rm", "[flags] NAME")
	cf := m.addClientFlags(fs, false)
	force := fs.Bool("force", false, "remove it even while it holds active jobs (they are no longer followed)")
	name, err := parseOneArg(fs, cf, args, "NAME", "give exactly one peer NAME")
	if err != nil {
		return err
	}
	if err := m.client(cf).DeletePeer(ctx, name, *force); err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "peer %s removed\n", name)
	return nil
}

func runPeers(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("peers", "[flags]")
	cf := m.addClientFlags(fs, true)
	cf.formats = append(cf.formats, "wide")
	fs.Lookup("o").Usage = "output: table, wide (more columns), json or yaml"
	if err := parseNoArgs(fs, cf, args, "berth peers"); err != nil {
		return err
	}
	list, err := m.client(cf).Peers(ctx)
	if err != nil {
		return err
	}
	if cf.output == "wide" {
		cf.output = "table"
		return peersTable(m, list, true)
	}
	return printList(m.Stdout, cf.output, list, func() error { return peersTable(m, list, false) })
}

// peersTable writes the table of berth peers; wide adds the active jobs,
// the last contact, the timeouts and the last error.
func peersTable(m *Main, list []*berth.PeerInfo, wide bool) error {
	now := time.Now()
	head := []string{"NAME", "URL", "STATE", "LAG", "CAPACITY", "LAST-SYNC"}
	if wide {
		head = append(head, "ACTIVE", "LAST-CONTACT", "ROUTE-TIMEOUT", "LOST-TIMEOUT", "ERROR")
	}
	t := newTable(m.Stdout, head...)
	for _, p := range list {
		st := p.Status
		lag := "-"
		if !st.LastSync.IsZero() {
			lag = time.Duration(st.Lag).Round(time.Second).String()
		}
		row := []string{p.Name, p.URL, string(st.State), lag, orDash(st.Capacity.Summary()), ago(st.LastSync, now)}
		if wide {
			row = append(row, strconv.Itoa(st.ActiveJobs), ago(st.LastContact, now), time.Duration(p.RouteTimeout).String(),
				time.Duration(p.LostTimeout).String(), orDash(truncate(st.LastError, 60)))
		}
		t.row(row...)
	}
	return t.flush()
}
