package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/agent"
)

// agentFlags are the flags that describe one worker.
type agentFlags struct {
	gpus        string
	slots       int
	queues      string
	labels      string
	healthEvery time.Duration
	models      string
	prewarm     string
	prewarmFor  time.Duration
	ports       string
	modelCache  string
	runAs       string
	userMap     string
	allowRoot   bool
	mpsPipeDir  string
}

func (m *Main) addAgentFlags(fs *flag.FlagSet, af *agentFlags) {
	fs.StringVar(&af.gpus, "gpus", "", "declare GPUs instead of discovering them with nvidia-smi, e.g. 4xH100:80GiB (0 for none);\ndeclared GPUs are not health-checked")
	fs.IntVar(&af.slots, "slots", 16, "most attempts this worker runs at once")
	fs.StringVar(&af.queues, "queues", "", "comma-separated queues to serve (default: every queue)")
	fs.StringVar(&af.labels, "labels", "", "comma-separated KEY=VALUE labels jobs can select")
	durationVar(fs, &af.healthEvery, "health-every", 30*time.Second, "how often (a `duration`, 1s to 24h) nvidia-smi checks the discovered GPUs; attempts on a GPU\nthat disappears or reports an Xid or ECC fault are stopped (exit code 78)")
	fs.StringVar(&af.models, "models", "", "comma-separated models already warm here (weights cached); jobs for them are placed here\npreferably")
	fs.StringVar(&af.prewarm, "prewarm", "", "command (run with sh -c) that loads a model the server expects jobs for, with {model}\nreplaced by its name, shell-quoted, e.g. 'huggingface-cli download {model}'; the model is warm\nhere once it exits 0 (default: prewarm hints are ignored)")
	durationVar(fs, &af.prewarmFor, "prewarm-timeout", 30*time.Minute, "how long a --prewarm command may run (a `duration`, 1s to 24h)")
	fs.StringVar(&af.ports, "ports", "8000-9000", "LOW-HIGH: the ports services get ({{SERVICE_PORT}})")
	fs.StringVar(&af.modelCache, "model-cache", "", "where services keep model weights ({{MODEL_CACHE}}; default DATA-DIR/models)")
	fs.StringVar(&af.runAs, "run-as", agent.RunAsAgent, "whose Unix account jobs run as: agent (the agent's own) or map (an agent running as root runs\neach job as the account of its Berth user: --user-map's, else the account of the same name)")
	fs.StringVar(&af.userMap, "user-map", "", "with --run-as map, a `file` of lines \"BERTHUSER UNIXACCOUNT\" (# comments); users not in it run\nas the account of their own name")
	fs.StringVar(&af.mpsPipeDir, "mps-pipe-dir", "", "the pipe `directory` of the CUDA MPS daemon running here (its CUDA_MPS_PIPE_DIRECTORY): jobs\nholding a fraction of a GPU run as MPS clients limited to their share of its threads and\nmemory (default: no MPS; a fraction's share is then advisory)")
	fs.BoolVar(&af.allowRoot, "allow-root-jobs", false, "with --run-as map, let a Berth user that maps to uid 0 run jobs as root (refused otherwise)")
}

// agentConfig turns flags into an agent configuration, discovering GPUs with
// nvidia-smi unless --gpus declares them; discovered GPUs are health-checked
// with the same nvidia-smi.
func (af *agentFlags) agentConfig(ctx context.Context) (agent.Config, error) {
	var cfg agent.Config
	if af.slots < 1 || af.slots > 10000 {
		return cfg, berth.Invalidf("--slots", "must be between 1 and 10000")
	}
	if af.healthEvery < time.Second || af.healthEvery > 24*time.Hour {
		return cfg, berth.Invalidf("--health-every", "%v: must be between 1s and 24h", af.healthEvery)
	}
	if af.prewarmFor < time.Second || af.prewarmFor > 24*time.Hour {
		return cfg, berth.Invalidf("--prewarm-timeout", "%v: must be between 1s and 24h", af.prewarmFor)
	}
	if af.prewarm != "" && !strings.Contains(af.prewarm, "{model}") {
		return cfg, berth.Invalidf("--prewarm", "%q: must contain {model}, where the model's name goes", af.prewarm)
	}
	if af.models != "" {
		for _, model := range strings.Split(af.models, ",") {
			model = strings.TrimSpace(model)
			if err := agent.ValidModel("--models", model); err != nil {
				return cfg, err
			}
			cfg.Models = append(cfg.Models, model)
		}
	}
	cfg.Slots, cfg.HealthEvery, cfg.Prewarm, cfg.PrewarmTimeout = af.slots, af.healthEvery, af.prewarm, af.prewarmFor
	if af.mpsPipeDir != "" && !filepath.IsAbs(af.mpsPipeDir) {
		return cfg, berth.Invalidf("--mps-pipe-dir", "%q: must be an absolute path (the MPS daemon's CUDA_MPS_PIPE_DIRECTORY)", af.mpsPipeDir)
	}
	cfg.MPSPipeDir = af.mpsPipeDir
	lo, hi, ok := strings.Cut(af.ports, "-")
	var errLo, errHi error
	cfg.PortLo, errLo = strconv.Atoi(lo)
	cfg.PortHi, errHi = strconv.Atoi(hi)
	if !ok || errLo != nil || errHi != nil || cfg.PortLo < 1 || cfg.PortHi > 65535 || cfg.PortLo > cfg.PortHi {
		return cfg, berth.Invalidf("--ports", "%q: want LOW-HIGH within 1-65535, e.g. 8000-9000", af.ports)
	}
	cfg.ModelCache = af.modelCache
	if af.runAs != agent.RunAsAgent && af.runAs != agent.RunAsMap {
		return cfg, berth.Invalidf("--run-as", "%q: want %s or %s", af.runAs, agent.RunAsMap, agent.RunAsAgent)
	}
	if af.runAs != agent.RunAsMap && (af.userMap != "" || af.allowRoot) {
		return cfg, berth.Invalidf("--run-as", "--user-map and --allow-root-jobs need --run-as map")
	}
	cfg.RunAs, cfg.AllowRootJobs = af.runAs, af.allowRoot
	if af.userMap != "" {
		m, err := agent.ReadUserMap(af.userMap)
		if err != nil {
			return cfg, &berth.Error{Code: berth.ECodeInvalid, Field: "--user-map", Err: err}
		}
		cfg.UserMap = m
	}
	if af.gpus != "" {
		gpus, err := berth.ParseGPUSpec(af.gpus)
		if err != nil {
			return cfg, &berth.Error{Code: berth.ECodeInvalid, Field: "--gpus", Err: err}
		}
		cfg.GPUs = gpus
	} else if smi, ok := agent.FindNvidiaSMI(); ok {
		gpus, err := agent.DiscoverGPUs(ctx, smi)
		if err != nil {
			return cfg, fmt.Errorf("discover GPUs (use --gpus to declare them): %w", err)
		}
		cfg.GPUs, cfg.NvidiaSMI = gpus, smi
	}
	if af.queues != "" {
		for _, q := range strings.Split(af.queues, ",") {
			q = strings.TrimSpace(q)
			if !berth.ValidQueue(q) {
				return cfg, berth.Invalidf("--queues", "%q: must be lower-case letters, digits, '_' or '-'", q)
			}
			cfg.Queues = append(cfg.Queues, q)
		}
	}
	labels, err := parseKeyValues(af.labels, "--labels")
	if err != nil {
		return cfg, err
	}
	cfg.Labels = labels
	cfg.CPUs, cfg.Memory = agent.HostResources()
	return cfg, nil
}

// parseKeyValues parses "a=1,b=2".
func parseKeyValues(s, flagName string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, berth.Invalidf(flagName, "%q is not KEY=VALUE", kv)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}

// agentUsage is berth agent's help text before its flags.
const agentUsage = `[flags]

Joins the server and runs the jobs it assigns as child process groups. A job
reports progress (a fraction or a short message) with a line
"BERTH_PROGRESS 0.5" in its output or with curl -d 0.5 "$BERTH_PROGRESS_URL";
either counts as activity for its stall_timeout. An attempt the agent ends
itself exits with 75 (max_runtime), 76 (stalled), 77 (reassigned elsewhere),
78 (GPU health), 79 (stopped by an operator turning the worker off), 80
(a service that did not become ready), 81 (its agent was stopped: the job
goes back to the queue for another worker, no retry spent), 82 (oom: the
kernel killed it at its memory limit) or 83 (rank 0 of a gang not started
because its MASTER_PORT was in use here: the gang is placed again with
another port, no retry spent).

Where the agent can make cgroups (it runs as root, with cgroup v2's memory
and cpu controllers or v1's memory and cpu hierarchies), each attempt runs
in a cgroup of its own: the job's cpus and memory are enforced, and every
process in it, daemons that left the process group included, is killed
when the attempt ends. Otherwise the agent logs at start that limits are
not enforced, and jobs run as before. With --run-as map, an agent running
as root runs each job as its Berth user's Unix account (see
docs/security.md for what is and is not isolated).

--server may list the servers of a highly available control plane,
comma-separated (--server http://a:7070,http://b:7070): the agent keeps a
session with the one that leads and, when it loses it, reconnects to the
leader a standby names or to the next server, reporting its running
attempts, which keep running if it reconnects within its lease.

The agent reports the models warm here: those named by --models, and the
model of every job that succeeded here (its weights are now cached). When
the server expects jobs for a model warm nowhere, it hints an idle agent,
which runs its --prewarm command for that model (one at a time per model,
output in DATA_DIR/prewarm.log, no GPU visible) and reports the model warm
once the command exits 0.`

func runAgent(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("agent", agentUsage)
	cf := m.addClientFlags(fs, false)
	var af agentFlags
	m.addAgentFlags(fs, &af)
	hostname, _ := os.Hostname()
	dataDir := fs.String("data-dir", ".berth/agent", "directory for attempt output and the worker id")
	host := fs.String("host", hostname, "host label of this worker")
	keep := fs.Bool("keep-services", true, "leave services running when the agent stops, for the agent started next on this\ndata dir to adopt (within --lease of the server, else they are retried elsewhere)")
	advertise := fs.String("advertise", "", "the `address` (an IP or a host name, no port) other machines and the server reach\nthis worker at: its services' endpoints and, for rank 0 of a gang, MASTER_ADDR\n(default: the local address of this agent's connection to the server)")
	join := fs.String("join-token", m.Getenv("BERTH_JOIN_TOKEN"), "a join token (berth token create --role agent), traded at the first start for a credential\nof this agent's own, kept in DATA-DIR/credential (default $BERTH_JOIN_TOKEN)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	if err := berth.ValidHost("--host", *host); err != nil {
		return err
	}
	if *advertise != "" {
		if err := berth.ValidAdvertise("--advertise", *advertise); err != nil {
			return err
		}
	}
	cfg, err := af.agentConfig(ctx)
	if err != nil {
		return err
	}
	cfg.Server, cfg.Token, cfg.JoinToken, cfg.TLS = cf.server, m.Getenv("BERTH_TOKEN"), *join, cf.tls
	cfg.DataDir, cfg.Host, cfg.Version, cfg.KeepServices, cfg.Advertise = *dataDir, *host, Version, *keep, *advertise
	cfg.Log = slog.New(slog.NewTextHandler(m.Stderr, nil))
	if cfg.Watchdog, err = watchdogArgv(); err != nil {
		return err
	}
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "berth agent %s (host %s, %s) joining %s\n", a.WorkerID(), cfg.Host, berth.Count(len(cfg.GPUs), "GPU"), cfg.Server)
	err = a.Run(ctx)
	var refused *agent.RefusedError
	if errors.As(err, &refused) {
		return fmt.Errorf("%w; %s", err, joinAgain(refused))
	}
	return err
}

// joinAgain says how to give an agent the server refused (refused) a
// credential the server accepts: a join token, given once the refused
// credential is out of the way (the agent prefers $BERTH_TOKEN, then its
// saved credential, to a join token).
func joinAgain(refused *agent.RefusedError) string {
	const join = "start it with a join token in $BERTH_JOIN_TOKEN (or --join-token TOKEN), " +
		"which an admin makes with berth token create --role agent --name NAME"
	switch {
	case refused.Saved != "":
		return "delete " + refused.Saved + " and " + join
	case refused.Sent:
		return "it is $BERTH_TOKEN: unset it and " + join
	}
	return join
}

// watchdogCommand is the hidden subcommand a berth agent starts as its
// watchdog (agent.Config.Watchdog): berth agent-watchdog DATA-DIR, with
// the pipe from the agent as stdin and the agent's data-dir lock as fd 3.
const watchdogCommand = "agent-watchdog"

// watchdogArgv returns the command an agent starts as its watchdog: this
// binary's agent-watchdog. It fails only when the binary cannot be found.
func watchdogArgv() ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("agent: find this binary to start its watchdog: %w", err)
	}
	return []string{exe, watchdogCommand}, nil
}

// runWatchdog runs an agent's watchdog (agent.Watchdog) and returns its
// exit status: 0, or 1 when it could not read the agent's pipe or journal
// or signal a process (it says why on stderr), 2 without exactly one
// argument. It keeps fd 3, the agent's data-dir lock, open until it
// returns, so that no new agent starts there before it is done.
func (m *Main) runWatchdog(args []string) int {
	if len(args) != 1 {
		fmt.Fprintf(m.Stderr, "berth: %s DATA-DIR is started by berth agent, not by hand\n", watchdogCommand)
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(m.Stderr, nil)).With("watchdog_of", args[0])
	if err := agent.Watchdog(args[0], m.Stdin, log); err != nil {
		log.Error("killing the attempts of an agent that died", "err", err)
		return exitFailed
	}
	return 0
}
