package controller

import (
	"context"
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
// its first pass. It reports the start's time and the heap the jobs hold,
// per job.
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
		if err := c.do(ctx, func() {}); err != nil { // the first pass has run
			b.Fatal(err)
		}
		b.StopTimer()
		cpu += cpuTime() - cpu0
		perJob = float64(heapInUse()-base) / float64(n)
		if f := os.Getenv("BERTH_BENCH_HEAP"); f != "" {
			out, _ := os.Create(f)
			pprof.WriteHeapProfile(out)
			out.Close()
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
	have := 0
	c := New(Config{Store: st})
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer c.Stop(ctx)
	t0 := time.Now()
	for have < n {
		spec := berth.DefaultJobSpec()
		spec.Queue, spec.User, spec.Command = "parked", "bench", berth.Argv{"true"}
		k := min(n-have, berth.MaxArray)
		if _, err := c.Submit(ctx, &berth.SubmitRequest{JobSpec: spec, Array: k}); err != nil {
			b.Fatal(err)
		}
		have += k
	}
	b.Logf("seeded %d jobs in %v", n, time.Since(t0))
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
