package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
	"github.com/berth-dev/berth/sim"
	"github.com/berth-dev/berth/sim/trace"
)

// simRun is one loaded simulation: the inputs and the policies to compare.
type simRun struct {
	tracePath, clusterPath string
	cluster                *sim.Cluster
	workload               *sim.Workload
	policies               []string
	configs                []scheduler.Config
	speedup                float64
}

func runSim(ctx context.Context, m *Main, args []string) error {
	if len(args) > 0 && args[0] == "market" {
		return runSimMarket(m, args[1:])
	}
	if len(args) > 0 && args[0] == "fill" {
		return runSimFill(ctx, m, args[1:])
	}
	fs := m.flagSet("sim", "[--trace] TRACE --cluster FILE [flags]   (or: berth sim market|fill [flags])")
	workload := fs.String("trace", "", "workload: an Alibaba pod list, a Tiresias job list or Berth YAML (jobs:)")
	cluster := fs.String("cluster", "", "cluster: an Alibaba node list, a Tiresias cluster spec or Berth YAML (workers:)")
	policy := fs.String("policy", strings.Join(scheduler.PolicyNames(), ","), "policies to compare, comma-separated")
	format := fs.String("format", trace.FormatAuto, "format of both files: "+strings.Join(trace.Formats, ", "))
	speedup := fs.Float64("speedup", 1, "divide submission times by this, keeping durations (more load)")
	output := fs.String("o", "table", "output: table or json")
	profile := fs.String("cpuprofile", "", "write a CPU profile of the replays to this file")
	var positional string // berth sim TRACE --cluster FILE
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		positional, args = args[0], args[1:]
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return berth.Invalidf("args", "unexpected argument %q", fs.Arg(0))
	}
	if positional != "" {
		if *workload != "" {
			return berth.Invalidf("--trace", "given twice, as %s and %s", positional, *workload)
		}
		*workload = positional
	}
	switch {
	case *workload == "":
		return berth.Invalidf("--trace", "is required")
	case *cluster == "":
		return berth.Invalidf("--cluster", "is required")
	case *output != "table" && *output != "json":
		return berth.Invalidf("-o", "must be table or json")
	case !(*speedup > 0) || *speedup > 1e12:
		return berth.Invalidf("--speedup", "must be a positive number")
	case !slices.Contains(trace.Formats, *format):
		return berth.Invalidf("--format", "must be one of %s", strings.Join(trace.Formats, ", "))
	}
	r, err := loadSim(*workload, *cluster, *format, *policy, *speedup)
	if err != nil {
		return err
	}
	stop, err := startCPUProfile(*profile)
	if err != nil {
		return err
	}
	defer stop()
	results := make(map[string]sim.Result, len(r.policies))
	for i, name := range r.policies {
		res, err := sim.Run(ctx, r.cluster, r.workload, r.configs[i])
		if err != nil {
			return fmt.Errorf("sim %s: %w", name, err)
		}
		res.Policy = name
		results[name] = res
	}
	if *output == "json" {
		return printJSON(m.Stdout, results)
	}
	return r.print(m.Stdout, results)
}

// loadSim reads the files and checks the policies and speed-up.
func loadSim(workloadPath, cluster, format, policies string, speedup float64) (*simRun, error) {
	r := &simRun{tracePath: workloadPath, clusterPath: cluster, speedup: speedup}
	var err error
	if r.policies, r.configs, err = parsePolicies(policies); err != nil {
		return nil, err
	}
	if r.cluster, err = trace.LoadCluster(cluster, format); err != nil {
		return nil, err
	}
	if r.workload, err = trace.LoadWorkload(workloadPath, format, r.cluster); err != nil {
		return nil, err
	}
	if err := r.workload.ScaleArrivals(speedup); err != nil {
		return nil, berth.Invalidf("--speedup", "must be a positive number")
	}
	return r, nil
}

// parsePolicies reads --policy: policy names, comma-separated, each once.
func parsePolicies(list string) (names []string, configs []scheduler.Config, err error) {
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		cfg, err := scheduler.PolicyConfig(name)
		if err != nil {
			return nil, nil, &berth.Error{Code: berth.ECodeInvalid, Field: "--policy", Err: err}
		}
		if slices.Contains(names, name) {
			return nil, nil, berth.Invalidf("--policy", "%s is named twice", name)
		}
		names, configs = append(names, name), append(configs, cfg)
	}
	return names, configs, nil
}

// print writes one column per policy.
func (r *simRun) print(w io.Writer, results map[string]sim.Result) error {
	first := results[r.policies[0]]
	fmt.Fprintf(w, "berth sim: %s (%d jobs, %d records skipped) on %s (%d workers, %d GPUs), speed-up %g\n\n",
		r.tracePath, first.Jobs, r.workload.Skipped, r.clusterPath, first.Workers, first.GPUs, r.speedup)
	t := newTable(w, append([]string{"metric"}, r.policies...)...)
	row := func(name string, cell func(sim.Result) string) {
		cols := []string{name}
		for _, p := range r.policies {
			cols = append(cols, cell(results[p]))
		}
		t.row(cols...)
	}
	row("jobs completed", func(s sim.Result) string { return fmt.Sprint(s.Completed) })
	row("unschedulable", func(s sim.Result) string { return fmt.Sprint(s.Unschedulable) })
	row("makespan", func(s sim.Result) string { return seconds(s.MakespanSeconds) })
	row("GPU utilisation", func(s sim.Result) string { return percent(s.GPUUtilization) })
	stats := func(name string, get func(sim.Result) sim.Stats) {
		row(name+" mean", func(s sim.Result) string { return seconds(get(s).Mean) })
		row(name+" p50", func(s sim.Result) string { return seconds(get(s).P50) })
		row(name+" p95", func(s sim.Result) string { return seconds(get(s).P95) })
		row(name+" p99", func(s sim.Result) string { return seconds(get(s).P99) })
		row(name+" max", func(s sim.Result) string { return seconds(get(s).Max) })
	}
	stats("JCT", func(s sim.Result) sim.Stats { return s.JCT })
	stats("wait", func(s sim.Result) sim.Stats { return s.Wait })
	row("fragmentation", func(s sim.Result) string { return percent(s.Fragmentation) })
	row("preemptions", func(s sim.Result) string { return fmt.Sprint(s.Preemptions) })
	row("longest starvation", func(s sim.Result) string {
		if s.LongestStarvationSeconds == 0 {
			return "0s"
		}
		return seconds(s.LongestStarvationSeconds) + " (" + s.LongestStarvationJob + ")"
	})
	row("scheduler passes", func(s sim.Result) string { return fmt.Sprint(s.Passes) })
	row("replay wall time", func(s sim.Result) string { return fmt.Sprintf("%.3fs", s.WallSeconds) })
	if err := t.flush(); err != nil {
		return err
	}
	for _, p := range r.policies {
		printReasons(w, p, results[p].UnschedulableReasons)
	}
	return nil
}

// printReasons lists why jobs were unschedulable, most common first.
func printReasons(w io.Writer, policy string, reasons map[string]int) {
	why := make([]string, 0, len(reasons))
	for k := range reasons {
		why = append(why, k)
	}
	sort.Slice(why, func(i, j int) bool {
		if reasons[why[i]] != reasons[why[j]] {
			return reasons[why[i]] > reasons[why[j]]
		}
		return why[i] < why[j]
	})
	for _, k := range why {
		fmt.Fprintf(w, "%s: %d unschedulable: %s\n", policy, reasons[k], k)
	}
}

func percent(f float64) string { return fmt.Sprintf("%.2f%%", 100*f) }

// seconds formats a virtual duration in seconds compactly: 42s, 3m20s,
// 2h05m, 3d04h.
func seconds(s float64) string {
	switch {
	case s < 10:
		return fmt.Sprintf("%.1fs", s)
	case s < 60:
		return fmt.Sprintf("%.0fs", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", int(s)/60, int(s)%60)
	case s < 48*3600:
		return fmt.Sprintf("%dh%02dm", int(s)/3600, int(s)%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", int(s)/86400, int(s)%86400/3600)
}
