// Command berth is Berth's one binary: the server, the worker agent and the
// command-line client. See "berth help".
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/client"
	"github.com/berth-dev/berth/devca"
)

// Version is the build version, set with -ldflags "-X main.Version=…".
var Version = "dev"

func main() {
	m := &Main{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	os.Exit(m.Run(stopOnSignal(), os.Args[1:]))
}

// stopOnSignal returns a context that ends on the first SIGINT or SIGTERM,
// which asks the command to stop gracefully. Before it ends, the signals
// get their default effect back, so that a second Ctrl-C during a slow
// stop ends berth at once.
func stopOnSignal() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		signal.Stop(sigs)
		cancel()
	}()
	return ctx
}

// Main runs one berth command with injectable output and environment so
// tests can drive it.
type Main struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string

	savedTokenOf string   // the server whose saved token this run sends, if any
	globals      []string // the client flags given before the command

	// subcommandsSeen, when set, asks a command made of subcommands to
	// store their names there and do nothing else (berth completion).
	subcommandsSeen *[]string
}

// command is one subcommand: it parses its own flags from args and runs.
type command struct {
	summary string
	run     func(ctx context.Context, m *Main, args []string) error
}

var commands = map[string]command{
	"up":        {"start a server and local agents on embedded SQLite; runs a demo job", runUp},
	"server":    {"run the control plane only", runServer},
	"agent":     {"run a worker agent that joins a server", runAgent},
	"submit":    {"submit a job (or an array of jobs)", runSubmit},
	"run":       {"run a job attached: print its output as it runs, exit with its exit code", runRun},
	"swap":      {"swap the model a pool of workers serves (the catalog's MODEL_KEY)", runSwap},
	"serve":     {"run a service (a model server, a notebook) until stopped", runServe},
	"services":  {"list services and where they serve", runServices},
	"endpoints": {"list the endpoints of ready services", runEndpoints},
	"jobs":      {"list jobs", runJobs},
	"job":       {"show one job with its attempts and why it waits", runJob},
	"logs":      {"print a job's output (-f to follow)", runLogs},
	"cancel":    {"cancel jobs", runCancel},
	"exec":      {"run a command inside a running job, on its worker", runExec},
	"attempt":   {"check that an attempt may still act for its job, before a side effect (check)", runAttempt},
	"wait":      {"wait for jobs to end; exit 0 only if all succeeded", runWait},
	"workers":   {"list workers", runWorkers},
	"quota":     {"manage quota rules (set, list, rm)", runQuota},
	"peer":      {"add or remove a federation peer: another Berth cluster jobs may be handed to (add, rm)", runPeer},
	"peers":     {"list federation peers: their state, lag and free GPUs", runPeers},
	"lock":      {"hold, show or release the model swap lock (acquire, status, release)", runLock},
	"schedule":  {"register, list or remove the schedules that will use the GPUs (add, list, rm)", runSchedule},
	"token":     {"manage access tokens (create, list, revoke)", runToken},
	"secret":    {"manage your secrets (set, list, rm)", runSecret},
	"pool":      {"add or remove a cloud pool: GPUs rented from Vast.ai when jobs wait (add, rm)", runPool},
	"pools":     {"list cloud pools: their instances, spend and caps", runPools},
	"backend":   {"add or remove an execution backend: a Kubernetes cluster jobs run on as pods (add, rm)", runBackend},
	"backends":  {"list execution backends: the agent pool and clusters, their state, nodes, GPUs and pods", runBackends},
	"contract":  {"call, show, add or remove an extraction contract: images and text in, validated JSON out (run, show, add, rm)", runContract},
	"contracts": {"list the extraction contracts: model, inputs, image limits", runContracts},
	"instances": {"list the instances cloud pools rented: phase, price, spend, last failure", runInstances},
	"instance":  {"show a rented instance: its phase timeline and each readiness probe; rm ID gives one back", runInstance},
	"hosts":     {"list, block, unblock or clear the marketplace machines' records (list, block, unblock, clear)", runHosts},
	"provision": {"rent one instance for a pool through every readiness phase; exit 0 if ready", runProvision},
	"webhook":   {"subscribe URLs to events; see deliveries, redeliver (add, list, rm, deliveries, redeliver)", runWebhook},
	"audit":     {"verify, tail or export the tamper-evident audit log", runAudit},
	"worker":    {"turn a host's workers on or off (drain, pause, hard stop)", runWorker},
	"bench":     {"measure throughput and latency on this machine", runBench},
	"sim":       {"replay a workload trace through the scheduler in virtual time", runSim},

	"port-forward": {"forward a local port to a port of a running job", runPortForward},
}

// exitError carries a specific exit status.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// Exit statuses.
const (
	exitFailed  = 1   // a job did not succeed
	exitUsage   = 2   // bad input or the server refused
	exitTimeout = 124 // gave up waiting: --timeout ran out, or no server answered for 2 minutes
	exitStopped = 130 // interrupted (Ctrl-C) while waiting, as a shell reports it
)

// Run runs the command named by args[0], after the client flags that may
// come before it, and returns the process exit status.
func (m *Main) Run(ctx context.Context, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		writeUsage(m.Stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return 0
	}
	if args[0] == "--version" {
		return m.exit(ctx, m.version())
	}
	if args[0] == watchdogCommand {
		return m.runWatchdog(args[1:])
	}
	globals, rest, err := m.splitGlobals(args)
	if err == nil && len(rest) == 0 {
		err = berth.Invalidf("command", "give a command after the flags (see berth help)")
	}
	if err != nil {
		return m.exit(ctx, err)
	}
	m.globals = globals
	return m.exit(ctx, m.dispatch(ctx, rest))
}

// dispatch runs the command args[0] with the rest of args.
func (m *Main) dispatch(ctx context.Context, args []string) error {
	switch args[0] {
	case "help":
		return m.help(ctx, args[1:])
	case "version":
		return m.version()
	case "completion":
		return m.completion(ctx, args[1:])
	}
	cmd, ok := commands[args[0]]
	if !ok {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("unknown command %q%s (see berth help)", args[0], suggest(args[0], commandNames()))}
	}
	return cmd.run(ctx, m, m.withGlobals(args[1:]))
}

// exit prints err, if any, as one line (with a hint for the CLI where one
// helps) and returns the exit status it means.
func (m *Main) exit(ctx context.Context, err error) int {
	if err == nil {
		return 0
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return exitStopped // the person who pressed Ctrl-C needs no message
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(m.Stderr, "berth:", ee.msg)
		}
		return ee.code
	}
	fmt.Fprintf(m.Stderr, "berth: %s%s\n", errorLine(err), m.hint(err))
	return exitUsage
}

// errorLine is how an error is printed: a *berth.Error with its code in
// brackets, e.g. "id: no job \"x\" (not_found)".
func errorLine(err error) string {
	var be *berth.Error
	if errors.As(err, &be) {
		return fmt.Sprintf("%s (%s)", be.Error(), be.Code)
	}
	return err.Error()
}

// flagSet returns a FlagSet whose -h prints the command's usage to
// m.Stderr; parse reports its errors.
func (m *Main) flagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet("berth "+name, flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: berth %s %s\n\nFlags:\n", name, usage)
		var defaults bytes.Buffer
		out := fs.Output()
		fs.SetOutput(&defaults)
		fs.PrintDefaults()
		fs.SetOutput(out)
		// Flags as people type them (and berth's errors name them): -o, --server.
		_, _ = io.WriteString(out, longFlag.ReplaceAllString(defaults.String(), "$1--$2"))
	}
	return fs
}

// longFlag matches a flag of two letters or more in PrintDefaults.
var longFlag = regexp.MustCompile(`(?m)^(  )-(\w\w)`)

// parse parses flags. -h prints the usage and returns flag.ErrHelp; a bad
// flag is an invalid *berth.Error naming it, printed as one line rather
// than the flag package's report (its error, then the whole usage).
func parse(fs *flag.FlagSet, args []string) error {
	if err := checkRepeats(fs, args); err != nil {
		return err
	}
	out := fs.Output()
	var report bytes.Buffer
	fs.SetOutput(&report)
	err := fs.Parse(args)
	fs.SetOutput(out)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		_, _ = report.WriteTo(out) // only the usage
		return err
	}
	return flagError(fs, err)
}

// flagError turns the flag package's error for fs into one naming the
// flag, with the way to the command's flags.
func flagError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	field, why := "", msg
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		field, why = flagName(name), "no such flag"+suggest(flagName(name), flagNames(fs))
	} else if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		field, why = flagName(name), "needs a value"
	} else if rest, ok := strings.CutPrefix(msg, "invalid boolean value "); ok {
		value, name, _ := strings.Cut(rest, " for ")
		name, _, _ = strings.Cut(name, ": ")
		field, why = flagName(name), "must be true or false, not "+value
	} else if rest, ok := strings.CutPrefix(msg, "invalid value "); ok {
		value, rest, _ := strings.Cut(rest, " for flag ")
		name, inner, _ := strings.Cut(rest, ": ")
		field, why = flagName(name), inner
		if fl := fs.Lookup(strings.TrimLeft(name, "-")); fl != nil && inner == "parse error" {
			why = badValue(fl.Value, value)
		} else if inner == "value out of range" {
			why = value + " is out of range"
		}
	}
	return berth.Invalidf(field, "%s; %s -h lists the flags", why, fs.Name())
}

// flagName writes a flag as Berth's errors do: -f, --memory.
func flagName(name string) string {
	name = strings.TrimLeft(name, "-")
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// badValue says why quoted, a value the flag package could not parse, is
// no value for a flag of v's kind.
func badValue(v flag.Value, quoted string) string {
	if g, ok := v.(flag.Getter); ok {
		switch g.Get().(type) {
		case int, int64, uint, uint64:
			return "must be a whole number, not " + quoted
		case float64:
			return "must be a number, not " + quoted
		}
	}
	return quoted + " is not a valid value"
}

// durationValue is a duration flag that takes what job files do: "90s",
// "1h30m", "30d" (berth.ParseDuration, whose error says what it wants).
type durationValue time.Duration

func (d *durationValue) String() string { return time.Duration(*d).String() }

func (d *durationValue) Set(s string) error {
	v, err := berth.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

// durationVar defines a duration flag like flag.DurationVar but with
// durationValue's syntax. The flag's usage should name its kind as
// `duration` for -h.
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*durationValue)(p), name, usage)
}

// givenFlags returns the names of the flags of fs given on the command
// line (parsed already), as against those left at their defaults.
func givenFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// parseInterspersed parses flags given before, between or after the
// positional arguments (berth worker off HOST --queue gpu) and returns the
// positional arguments; "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := parse(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// parseNoArgs parses the flags of a command that takes no arguments
// (command names it in the error) and checks its client flags.
func parseNoArgs(fs *flag.FlagSet, cf *clientFlags, args []string, command string) error {
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return berth.Invalidf("args", "%s takes no arguments, got %q", command, fs.Arg(0))
	}
	return nil
}

// parseIDs parses the flags of a command that takes one or more ids (flags
// may also follow them), checks its client flags and returns the ids; none
// is an error saying hint.
func parseIDs(fs *flag.FlagSet, cf *clientFlags, args []string, hint string) ([]string, error) {
	ids, err := parseInterspersed(fs, args)
	if err != nil {
		return nil, err
	}
	if err := cf.check(); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, berth.Invalidf("id", "%s", hint)
	}
	return ids, nil
}

// parseOneArg parses the flags of a command that takes one argument, what
// (flags may also follow it), checks its client flags and returns the
// argument.
func parseOneArg(fs *flag.FlagSet, cf *clientFlags, args []string, what, hint string) (string, error) {
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return "", err
	}
	if err := cf.check(); err != nil {
		return "", err
	}
	if len(rest) != 1 {
		return "", berth.Invalidf(what, "%s", hint)
	}
	return rest[0], nil
}

// clientFlags are the flags of every command that talks to a server.
type clientFlags struct {
	server      string
	output      string
	formats     []string // what -o may be; addClientFlags sets table, json and yaml
	ca          string
	fingerprint string
	tls         *tls.Config // from ca and fingerprint, set by check
}

func (m *Main) addClientFlags(fs *flag.FlagSet, withOutput bool) *clientFlags {
	cf := &clientFlags{formats: []string{"table", "json", "yaml"}}
	def := m.Getenv("BERTH_SERVER")
	if def == "" {
		def = "http://127.0.0.1:7070"
	}
	fs.StringVar(&cf.server, "server", def, "server URL, or the comma-separated URLs of a highly available control plane's\nservers (the one that leads answers; the others are tried when one fails)")
	fs.StringVar(&cf.ca, "ca", m.Getenv("BERTH_CA"), "trust the https:// server's certificate when this CA (PEM file) signed it (default $BERTH_CA)")
	fs.StringVar(&cf.fingerprint, "ca-fingerprint", m.Getenv("BERTH_CA_FINGERPRINT"), "trust the https:// server when its chain holds the certificate with this SHA-256\nfingerprint (sha256:HEX, printed by the server; default $BERTH_CA_FINGERPRINT)")
	if withOutput {
		fs.StringVar(&cf.output, "o", "table", "output: table, json or yaml")
	}
	return cf
}

func (cf *clientFlags) check() error {
	if cf.output != "" && !slices.Contains(cf.formats, cf.output) {
		return berth.Invalidf("-o", "%q: must be %s%s", cf.output, strings.Join(cf.formats, ", "), suggest(cf.output, cf.formats))
	}
	for _, s := range client.ParseServers(cf.server).URLs() {
		if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return berth.Invalidf("--server", "%q: must be an http:// or https:// URL", s)
		}
	}
	var err error
	cf.tls, err = devca.ClientConfig(cf.ca, cf.fingerprint)
	return err
}

// defaultUser is whom a job runs as when the command does not say: the
// token's own name when it is a user's or a peer's (they may submit only as
// themselves), else $USER.
func (m *Main) defaultUser(cf *clientFlags) string {
	if c, ok := auth.Peek(m.token(cf)); ok && (c.Role == auth.RoleUser || c.Role == auth.RolePeer) {
		return c.Subject
	}
	return m.Getenv("USER")
}

// token is the token a client of cf's server sends: $BERTH_TOKEN, else the
// one saved for that server, whose URL it then notes for the hint on a
// refused token.
func (m *Main) token(cf *clientFlags) string {
	if t := m.Getenv("BERTH_TOKEN"); t != "" {
		return t
	}
	url := client.ParseServers(cf.server).URLs()[0]
	t := m.savedServers()[url].Token
	if t != "" {
		m.savedTokenOf = url
	}
	return t
}

// client returns a client of the flags' server, with the token of
// $BERTH_TOKEN, else the one saved for that server (berth up saves one),
// and the CA the flags name, else the one saved.
func (m *Main) client(cf *clientFlags) *client.Client {
	tlsConfig := cf.tls
	saved, ok := m.savedServers()[client.ParseServers(cf.server).URLs()[0]]
	if ok && tlsConfig == nil {
		tlsConfig, _ = devca.ClientConfig(saved.CA, saved.Fingerprint) // a bad saved CA fails the request instead
	}
	return client.New(cf.server, m.token(cf), tlsConfig)
}
