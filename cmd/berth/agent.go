package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/agent"
)

// agentFlags are the flags that describe one worker.
type agentFlags struct {
	gpus   string
	slots  int
	queues string
	labels string
}

func (m *Main) addAgentFlags(fs interface {
	StringVar(*string, string, string, string)
	IntVar(*int, string, int, string)
}, af *agentFlags) {
	fs.StringVar(&af.gpus, "gpus", "", "declare GPUs instead of discovering them with nvidia-smi, e.g. 4xH100:80GiB (0 for none)")
	fs.IntVar(&af.slots, "slots", 16, "most attempts this worker runs at once")
	fs.StringVar(&af.queues, "queues", "", "comma-separated queues to serve (default: every queue)")
	fs.StringVar(&af.labels, "labels", "", "comma-separated KEY=VALUE labels jobs can select")
}

// agentConfig turns flags into an agent configuration, discovering GPUs with
// nvidia-smi unless --gpus declares them.
func (af *agentFlags) agentConfig(ctx context.Context) (agent.Config, error) {
	var cfg agent.Config
	if af.slots < 1 || af.slots > 10000 {
		return cfg, berth.Invalidf("--slots", "must be between 1 and 10000")
	}
	cfg.Slots = af.slots
	if af.gpus != "" {
		gpus, err := berth.ParseGPUSpec(af.gpus)
		if err != nil {
			return cfg, berth.Invalidf("--gpus", "%v", err)
		}
		cfg.GPUs = gpus
	} else if smi, ok := agent.FindNvidiaSMI(); ok {
		gpus, err := agent.DiscoverGPUs(ctx, smi)
		if err != nil {
			return cfg, fmt.Errorf("discover GPUs (use --gpus to declare them): %w", err)
		}
		cfg.GPUs = gpus
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

func runAgent(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("agent", "[flags]")
	cf := m.addClientFlags(fs, false)
	var af agentFlags
	m.addAgentFlags(fs, &af)
	hostname, _ := os.Hostname()
	dataDir := fs.String("data-dir", ".berth/agent", "directory for attempt output and the worker id")
	host := fs.String("host", hostname, "host label of this worker")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	if *host == "" {
		return berth.Invalidf("--host", "must not be empty")
	}
	cfg, err := af.agentConfig(ctx)
	if err != nil {
		return err
	}
	cfg.Server, cfg.Token, cfg.DataDir, cfg.Host, cfg.Version = cf.server, m.Getenv("BERTH_TOKEN"), *dataDir, *host, Version
	cfg.Log = slog.New(slog.NewTextHandler(m.Stderr, nil))
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "berth agent %s (host %s, %d GPUs) joining %s\n", a.WorkerID(), cfg.Host, len(cfg.GPUs), cfg.Server)
	return a.Run(ctx)
}
