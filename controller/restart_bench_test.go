package controller

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/sqlite"
	"github.com/berth-dev/berth/store"
)

// BenchmarkRestart seeds a SQLite store with BERTH_BENCH_JOBS pending jobs
// (default 100,000) in arrays of up to 100,000 parked in a queue no worker
// serves, then times a controller's start on it: the load, the rebuild and
// its first pass. It reports the start's time and CPU time and the heap
// the jobs hold, per job. BERTH_BENCH_DB names a store file to use
// instead of a new one (seeded only when it holds no job, kept for the
// next run); BERTH_BENCH_HEAP, a file to write a heap profile to while the
// controller holds the jobs.
func BenchmarkRestart(b *testing.B) {
	n := 100_000
	if v := os.Getenv("BERTH_BENCH_JOBS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	path := filepath.Join(b.TempDir(), "berth.db")
	if v := os.Getenv("BERTH_BENCH_DB"); v != "" {
		path = v
	}
	ctx := context.Background()
	seed(b, ctx, path, n)
	base := heapInUse()
	b.ResetTimer()
	var perJob float64
	var cpu time.Duration
	for b.Loop() {
		cpu0 := cpuTime()
		st, err := sqlite.Open(ctx, path)
		if err != nil {
			b.Fatal(err)
		}
		c := New(Config{Store: st})
		if err := c.Start(ctx); err != nil {
			b.Fatal(err)
		}
		for range 2 { // the loop's first iteration, and with it the first pass, is over
			if err := c.do(ctx, func() {}); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		cpu += cpuTime() - cpu0
		perJob = float64(heapInUse()-base) / float64(n)
		if f := os.Getenv("BERTH_BENCH_HEAP"); f != "" {
			writeHeapProfile(b, f)
		}
		runtime.KeepAlive(c)
		if err := c.Stop(ctx); err != nil {
			b.Fatal(err)
		}
		st.Close()
		b.StartTimer()
	}
	b.ReportMetric(perJob, "heap-B/job")
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
}

// seed submits n pending jobs to the store at path, in arrays parked in a
// queue no worker serves, unless it holds a job already.
func seed(b *testing.B, ctx context.Context, path string, n int) {
	b.Helper()
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	jobs, err := st.Jobs(ctx, store.JobFilter{Limit: 1})
	if err != nil {
		b.Fatal(err)
	}
	if len(jobs) > 0 {
		return // seeded by an earlier run (BERTH_BENCH_DB)
	}
	c := New(Config{Store: st})
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	for have := 0; have < n; {
		spec := berth.DefaultJobSpec()
		spec.Queue, spec.User, spec.Command = "parked", "bench", berth.Argv{"true"}
		k := min(n-have, berth.MaxArray)
		if _, err := c.Submit(ctx, &berth.SubmitRequest{JobSpec: spec, Array: k}); err != nil {
			b.Fatal(err)
		}
		have += k
	}
	if err := c.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded %d jobs in %v", n, time.Since(t0))
}

// writeHeapProfile writes the heap's profile to path.
func writeHeapProfile(b *testing.B, path string) {
	b.Helper()
	out, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := errors.Join(pprof.WriteHeapProfile(out), out.Close()); err != nil {
		b.Fatal(err)
	}
}

// heapInUse returns the heap in use once garbage is collected.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// cpuTime returns the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPendingDemand times an autoscaler's view (PendingDemand) with
// 100,000 jobs queued (one array), on the loop: a tick of every pool's
// autoscaler holds the loop this long.
func BenchmarkPendingDemand(b *testing.B) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "berth.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	c := New(Config{Store: st})
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer c.Stop(ctx)
	spec := berth.DefaultJobSpec()
	spec.Queue, spec.Command, spec.Resources.GPUs = "parked", berth.Argv{"true"}, 1
	if _, err := c.Submit(ctx, &berth.SubmitRequest{JobSpec: spec, Array: berth.MaxArray, HoldUntilFits: true}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		view, err := c.PendingDemand(ctx, time.Now().Add(time.Hour))
		if err != nil || len(view.Demand) != 1 || view.Demand[0].Jobs != berth.MaxArray {
			b.Fatalf("PendingDemand = %+v, %v; want one shape of %d jobs", view, err, berth.MaxArray)
		}
	}
}
