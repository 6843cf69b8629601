package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
)

// poolCommands are the subcommands of berth pool.
var poolCommands = subcommands{
	name: "pool",
	help: `Usage: berth pool add|rm [flags] NAME

A cloud pool rents GPUs from a marketplace (Vast.ai) when jobs wait for
what no local worker has, within its caps, and gives them back when idle
(docs/pools.md). Operators and admins manage pools.

  berth pool add NAME --api-key-file FILE --gpu-type "RTX 4090" --max-instances 4 --max-price 0.60/h
                 [--provider vast] [--gpus 1] [--idle-timeout 10m] [--strictness balanced]
                 [--image IMAGE] [--vast-url URL] [--queues q1,q2] [--labels k=v,...]
                 [--preserve-on-failure]
                 [--workload agent|vllm --model MODEL [--max-model-len N] [--port 8000]]
  berth pool rm NAME [--force]
  berth pools [-o wide|json|yaml]
  berth provision --pool NAME        rent one instance through every phase, print its timeline

add on a pool that exists changes it (without --api-key-file it keeps its
key). The key is sealed on the server and never shown again. rm is refused
while the pool has live instances, unless --force.
`,
	run: map[string]func(ctx context.Context, m *Main, args []string) error{
		"add": runPoolAdd,
		"rm":  runPoolRm,
	},
}

func runPool(ctx context.Context, m *Main, args []string) error {
	return poolCommands.dispatch(ctx, m, args)
}

// poolFlags name the flags of berth pool add after the pool's fields they
// set, for the server's errors.
var poolFlags = map[string]string{
	"name": "NAME", "provider": "--provider", "api_key": "--api-key-file", "gpu_type": "--gpu-type", "gpus": "--gpus",
	"max_instances": "--max-instances", "max_price": "--max-price", "idle_timeout": "--idle-timeout",
	"strictness": "--strictness", "image": "--image", "url": "--vast-url", "queues": "--queues", "labels": "--labels",
	"workload": "--workload", "model": "--model", "max_model_len": "--max-model-len", "port": "--port",
}

// poolFlagError renames the field of err, a pool's, to its flag.
func poolFlagError(err error) error {
	if e := (*berth.Error)(nil); errors.As(err, &e) && poolFlags[e.Field] != "" {
		e.Field = poolFlags[e.Field]
	}
	return err
}

// priceValue is a flag of dollars an hour: 0.60/h (berth.ParsePrice).
type priceValue float64

func (p *priceValue) String() string { return formatPrice(float64(*p)) }

func (p *priceValue) Set(s string) error {
	v, err := berth.ParsePrice(s)
	if err != nil {
		return err
	}
	*p = priceValue(v)
	return nil
}

// formatPrice writes dollars an hour as 0.60/h.
func formatPrice(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) + "/h" }

func runPoolAdd(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("pool add", "[flags] NAME --api-key-file FILE --gpu-type T --max-instances N --max-price 0.60/h")
	cf := m.addClientFlags(fs, true)
	p := &berth.Pool{}
	fs.StringVar(&p.Provider, "provider", berth.ProviderVast, "the marketplace to rent from: vast")
	keyFile := fs.String("api-key-file", "", "file holding the provider account's API key (required to add; without it a change keeps the key)")
	fs.StringVar(&p.GPUType, "gpu-type", "", "the offers' GPU model, e.g. \"RTX 4090\" (required)")
	fs.IntVar(&p.GPUs, "gpus", 1, "GPUs per instance, 1 to 16")
	fs.IntVar(&p.MaxInstances, "max-instances", 0, "most instances rented at once, 1 to 1000 (required)")
	var price priceValue
	fs.Var(&price, "max-price", "most the pool may cost, a `price` in dollars an hour over its starting and ready instances, e.g. 0.60/h (required)")
	var idle time.Duration
	durationVar(fs, &idle, "idle-timeout", 10*time.Minute, "give an instance back after it has been idle this long, a `duration`")
	strictness := fs.String("strictness", string(berth.StrictnessBalanced), "how choosy about offers and hosts: strict, balanced or aggressive")
	fs.StringVar(&p.Image, "image", "", "container image of the instances (default: the provider's)")
	fs.StringVar(&p.URL, "vast-url", "", "the provider API's base URL (default: Vast.ai's)")
	queues := fs.String("queues", "", "comma-separated queues its agents serve (default: every queue)")
	labels := fs.String("labels", "", "comma-separated KEY=VALUE labels its agents carry")
	fs.BoolVar(&p.PreserveOnFailure, "preserve-on-failure", false, "keep an instance that failed for its host's fault, for inspection (still billed, still capped)")
	fs.StringVar(&p.Workload, "workload", berth.WorkloadAgent, "what the instances run: agent (berth agent, joining the queue) or vllm (a bare vLLM server of --model)")
	fs.StringVar(&p.Model, "model", "", "the model a vllm workload serves, a Hugging Face id or path (required with --workload vllm)")
	fs.IntVar(&p.MaxModelLen, "max-model-len", 0, "a vllm workload's context length in tokens (default: vLLM's, from the model)")
	fs.IntVar(&p.Port, "port", 0, "the port a vllm workload's server listens on (default 8000)")
	name, err := parseOneArg(fs, cf, args, "NAME", "give exactly one pool NAME, e.g. berth pool add rent --api-key-file ~/.vast_key --gpu-type \"RTX 4090\" --max-instances 4 --max-price 0.60/h")
	if err != nil {
		return err
	}
	p.Name, p.MaxPrice, p.IdleTimeout, p.Strictness = name, float64(price), berth.Duration(idle), berth.Strictness(*strictness)
	if *queues != "" {
		for _, q := range strings.Split(*queues, ",") {
			p.Queues = append(p.Queues, strings.TrimSpace(q))
		}
	}
	if p.Labels, err = parseKeyValues(*labels, "--labels"); err != nil {
		return err
	}
	if *keyFile != "" {
		data, err := os.ReadFile(*keyFile)
		if err != nil {
			return berth.Invalidf("--api-key-file", "read the provider's API key").WithCause(err)
		}
		if p.APIKey = strings.TrimSpace(string(data)); p.APIKey == "" {
			return berth.Invalidf("--api-key-file", "%s is empty: it should hold the provider account's API key", *keyFile)
		}
	}
	p.SetDefaults()
	if err := p.Validate(); err != nil {
		return poolFlagError(err)
	}
	info, err := m.client(cf).PutPool(ctx, p)
	if err != nil {
		return poolFlagError(err)
	}
	if cf.output != "table" {
		return printData(m.Stdout, cf.output, info)
	}
	fmt.Fprintf(m.Stdout, "pool %s: %s %d× %s, up to %d instances and %s, idle timeout %s, %s\n", info.Name, info.Provider,
		info.GPUs, info.GPUType, info.MaxInstances, formatPrice(info.MaxPrice), time.Duration(info.IdleTimeout), info.Strictness)
	if info.Workload == berth.WorkloadVLLM {
		fmt.Fprintf(m.Stdout, "  each instance a bare vLLM node: vllm serve %s on port %d%s\n", info.Model, info.Port, maxModelLenNote(info.MaxModelLen))
	}
	return nil
}

func runPoolRm(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("pool rm", "[flags] NAME")
	cf := m.addClientFlags(fs, false)
	force := fs.Bool("force", false, "remove it even while it has live instances (they are no longer managed: give them back by hand)")
	name, err := parseOneArg(fs, cf, args, "NAME", "give exactly one pool NAME (berth pools lists them)")
	if err != nil {
		return err
	}
	if err := m.client(cf).DeletePool(ctx, name, *force); err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "pool %s removed\n", name)
	return nil
}

func runPools(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("pools", "[flags]")
	cf := m.addClientFlags(fs, true)
	cf.formats = append(cf.formats, "wide")
	fs.Lookup("o").Usage = "output: table, wide (more columns), json or yaml"
	if err := parseNoArgs(fs, cf, args, "berth pools"); err != nil {
		return err
	}
	list, err := m.client(cf).Pools(ctx)
	if err != nil {
		return err
	}
	if cf.output == "wide" {
		return poolsTable(m.Stdout, list, true)
	}
	return printList(m.Stdout, cf.output, list, func() error { return poolsTable(m.Stdout, list, false) })
}

// maxModelLenNote says a vLLM pool's max_model_len, when it sets one.
func maxModelLenNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", max model len %d", n)
}

// poolsTable writes the table of berth pools: WORKLOAD is agent or vllm,
// INSTANCES ready/starting, SPEND/h what the live instances cost an hour,
// CAP the most instances and dollars an hour; wide adds the offers' GPUs,
// the idle timeout, the strictness, the queues and a vLLM pool's
// MODEL:PORT.
func poolsTable(w io.Writer, list []*berth.PoolInfo, wide bool) error {
	head := []string{"NAME", "PROVIDER", "WORKLOAD", "INSTANCES", "SPEND/h", "CAP"}
	if wide {
		head = append(head, "GPUS", "IDLE-TIMEOUT", "STRICTNESS", "QUEUES", "MODEL")
	}
	t := newTable(w, head...)
	for _, p := range list {
		row := []string{p.Name, p.Provider, orDash(p.Workload), fmt.Sprintf("%d/%d", p.Ready, p.Starting), "$" + strconv.FormatFloat(p.SpendPerH, 'f', 2, 64),
			fmt.Sprintf("%d×$%s", p.MaxInstances, formatPrice(p.MaxPrice))}
		if wide {
			row = append(row, fmt.Sprintf("%d× %s", p.GPUs, p.GPUType), time.Duration(p.IdleTimeout).String(),
				string(p.Strictness), orDash(strings.Join(p.Queues, ",")), "-")
			if p.Workload == berth.WorkloadVLLM {
				row[len(row)-1] = p.Model + ":" + strconv.Itoa(p.Port)
			}
		}
		t.row(row...)
	}
	return t.flush()
}

func runProvision(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("provision", "[flags] --pool NAME")
	cf := m.addClientFlags(fs, true)
	pool := fs.String("pool", "", "the pool to rent one instance for (required)")
	if err := parseNoArgs(fs, cf, args, "berth provision"); err != nil {
		return err
	}
	if *pool == "" {
		return berth.Invalidf("--pool", "give the pool to rent from (berth pools lists them)")
	}
	cl := m.client(cf)
	progress := m.Stdout
	if cf.output != "table" {
		progress = m.Stderr
	}
	seen := provisionSeen(ctx, cl, *pool)
	wctx, stop := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watchProvision(wctx, cl, *pool, seen, progress)
	}()
	in, err := cl.Provision(ctx, *pool)
	stop()
	<-watched
	if err != nil {
		return err
	}
	if cf.output != "table" {
		err = printData(m.Stdout, cf.output, in)
	} else {
		printInstance(m.Stdout, in, time.Now())
	}
	if err != nil || in.Phase == berth.InstanceReady {
		return err
	}
	return &exitError{code: exitFailed, msg: fmt.Sprintf("instance %s not ready (%s): %s", in.ID, in.Phase, failureLine(in))}
}

// provisionWatchEvery is how often berth provision reads the pool's
// instances to print what the provisioning does.
const provisionWatchEvery = time.Second

// provisionSeen is how many phase changes and probes each instance of
// pool has now (none when they cannot be read): what berth provision
// does not print again.
func provisionSeen(ctx context.Context, cl *client.Client, pool string) map[string][2]int {
	seen := map[string][2]int{}
	list, _ := cl.Instances(ctx, pool, false)
	for _, in := range list {
		seen[in.ID] = [2]int{len(in.Timeline), len(in.Probes)}
	}
	return seen
}

// watchProvision prints to w, every provisionWatchEvery until ctx ends,
// the phase changes and probes of pool's instances beyond those seen (by
// instance: how many of each were printed), each line after its
// instance's id: what a provisioning under way is doing. A read that
// fails is tried again at the next tick.
func watchProvision(ctx context.Context, cl *client.Client, pool string, seen map[string][2]int, w io.Writer) {
	t := time.NewTicker(provisionWatchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		list, err := cl.Instances(ctx, pool, false)
		if err != nil {
			continue
		}
		for _, in := range list {
			n := seen[in.ID]
			for _, l := range timelineLines(in, n[0], n[1]) {
				fmt.Fprint(w, in.ID+l)
			}
			seen[in.ID] = [2]int{len(in.Timeline), len(in.Probes)}
		}
	}
}

// failureLine says why instance in failed: its class and last error.
func failureLine(in *berth.Instance) string {
	switch {
	case in.Failure != "" && in.LastError != "":
		return in.Failure + ": " + in.LastError
	case in.Failure != "":
		return in.Failure
	}
	return in.LastError
}
