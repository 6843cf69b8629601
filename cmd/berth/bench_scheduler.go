package main

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
)

// SchedulerBenchResult is what berth bench scheduler measures: full
// scheduler passes over scheduler.Synthetic's workload (gangs, quotas and
// fair share on), each on a freshly built queue.
type SchedulerBenchResult struct {
	Workers           int     `json:"workers"`
	Pending           int     `json:"pending"`
	Passes            int     `json:"passes"`
	PlacementsPerPass int     `json:"placements_per_pass"`
	PassMs            float64 `json:"pass_ms"` // median
	PlacementsPerSec  float64 `json:"placements_per_sec"`
	BytesPerQueuedJob float64 `json:"bytes_per_queued_job"`
}

func runBenchScheduler(_ context.Context, m *Main, args []string) error {
	fs := m.flagSet("bench scheduler", "[flags]")
	workers := fs.Int("workers", 10_000, "workers of 8 GPUs")
	pending := fs.Int("pending", 100_000, "pending jobs")
	passes := fs.Int("passes", 3, "passes to time; the median is reported")
	output := fs.String("o", "table", "output: table or json")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case *workers < 1 || *workers > 1_000_000:
		return berth.Invalidf("--workers", "must be between 1 and 1000000")
	case *pending < 1 || *pending > 10_000_000:
		return berth.Invalidf("--pending", "must be between 1 and 10000000")
	case *passes < 1 || *passes > 100:
		return berth.Invalidf("--passes", "must be between 1 and 100")
	case *output != "table" && *output != "json":
		return berth.Invalidf("-o", "must be table or json")
	}
	now := time.Now()
	res := SchedulerBenchResult{Workers: *workers, Pending: *pending, Passes: *passes,
		BytesPerQueuedJob: queuedJobBytes(*workers, *pending, now)}
	times := make([]time.Duration, *passes)
	for i := range times {
		q, s := scheduler.Synthetic(*workers, *pending, now)
		runtime.GC()
		start := time.Now()
		res.PlacementsPerPass = len(scheduler.RunPass(q, s).Assignments)
		times[i] = time.Since(start)
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	median := times[len(times)/2]
	res.PassMs = float64(median) / float64(time.Millisecond)
	res.PlacementsPerSec = float64(res.PlacementsPerPass) / median.Seconds()
	if *output == "json" {
		return printJSON(m.Stdout, res)
	}
	fmt.Fprintf(m.Stdout, "berth bench scheduler: %d workers × %d pending, gangs, quotas and fair share on, %d CPUs\n",
		res.Workers, res.Pending, runtime.NumCPU())
	fmt.Fprintf(m.Stdout, "  one pass: %d placements in %.1f ms (median of %d) = %.0f placements/s\n",
		res.PlacementsPerPass, res.PassMs, res.Passes, res.PlacementsPerSec)
	fmt.Fprintf(m.Stdout, "  memory: %.0f bytes per queued job\n", res.BytesPerQueuedJob)
	return nil
}

// queuedJobBytes measures the heap a queued job costs the scheduler: the
// heap growth of building the workload less that of its cluster alone,
// per job.
func queuedJobBytes(workers, pending int, now time.Time) float64 {
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	h0 := heap()
	q0, s0 := scheduler.Synthetic(workers, 0, now)
	h1 := heap()
	q, s := scheduler.Synthetic(workers, pending, now)
	h2 := heap()
	runtime.KeepAlive(q0)
	runtime.KeepAlive(s0)
	runtime.KeepAlive(q)
	runtime.KeepAlive(s)
	return (float64(h2) - float64(h1) - (float64(h1) - float64(h0))) / float64(pending)
}
