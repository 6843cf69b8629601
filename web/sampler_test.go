package web

import (
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/controller"
)

func TestRingKeepsTheNewest(t *testing.T) {
	t.Parallel()
	r := newRing(3)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 5 {
		r.add(sample{Time: t0.Add(time.Duration(i) * time.Minute), Busy: i})
	}
	got := r.since(time.Time{})
	if len(got) != 3 || got[0].Busy != 2 || got[2].Busy != 4 {
		t.Fatalf("ring holds %+v, want the last three, oldest first", got)
	}
	if got := r.since(t0.Add(4 * time.Minute)); len(got) != 1 || got[0].Busy != 4 {
		t.Errorf("since the last = %+v, want only it", got)
	}
}

func TestThroughput(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)
	samples := []sample{
		{Time: now.Add(-70 * time.Minute), Finished: 0},
		{Time: now.Add(-10 * time.Minute), Finished: 100},
		{Time: now.Add(-5 * time.Minute), Finished: 150},
		{Time: now.Add(-1 * time.Minute), Finished: 190},
	}
	if v, ok := throughput(samples, now, 200, 5*time.Minute); !ok || v != 10 {
		t.Errorf("5-minute throughput = %v %v, want 10 jobs/min", v, ok)
	}
	if v, ok := throughput(samples, now, 200, time.Hour); !ok || v != 10 {
		t.Errorf("hourly throughput = %v %v, want 10 jobs/min (from the sample 10 minutes ago)", v, ok)
	}
	if _, ok := throughput(samples[3:], now, 200, time.Hour); ok {
		t.Errorf("a one-minute-old sample gave an hourly throughput; want none")
	}
	if _, ok := throughput(nil, now, 200, time.Minute); ok {
		t.Errorf("no samples gave a throughput")
	}
}

func TestPlot(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 6, 0, 0, 0, time.UTC)
	if got := string(plot("p", "Busy GPUs", "GPUs", nil, nil, now.Add(-time.Hour), now)); !strings.Contains(got, "no samples yet") || strings.Contains(got, "<svg") {
		t.Errorf("empty plot = %s", got)
	}
	var samples []sample
	for i := range 3000 { // more than maxPoints
		samples = append(samples, sample{Time: now.Add(-time.Duration(3000-i) * 7 * time.Second), Busy: i % 7})
	}
	samples[1500].Busy = 37
	got := string(plot("p", "Busy <GPUs>", "GPUs", samples, func(s sample) int { return s.Busy }, now.Add(-6*time.Hour), now))
	for _, want := range []string{`<svg id="p"`, `role="img"`, `<title id="p-t">Busy &lt;GPUs&gt;</title>`, "peak 37", ">50</text>", "<polyline"} {
		if !strings.Contains(got, want) {
			t.Errorf("plot lacks %q:\n%s", want, got)
		}
	}
	line := got[strings.Index(got, `points="`)+8:]
	line = line[:strings.Index(line, `"`)]
	if n := len(strings.Fields(line)); n > maxPoints || n < maxPoints/2 {
		t.Errorf("plot draws %d points, want at most %d (and not far fewer)", n, maxPoints)
	}
}

func TestNiceCeil(t *testing.T) {
	t.Parallel()
	for in, want := range map[int]int{0: 1, 1: 1, 2: 2, 3: 5, 7: 10, 10: 10, 11: 20, 37: 50, 120: 200, 999: 1000} {
		if got := niceCeil(in); got != want {
			t.Errorf("niceCeil(%d) = %d, want %d", in, got, want)
		}
	}
}

func TestSafeNext(t *testing.T) {
	t.Parallel()
	for next, want := range map[string]string{
		"/":                       "/",
		"/jobs?state=pending":     "/jobs?state=pending",
		"/jobs/01ABC":             "/jobs/01ABC",
		"":                        "",
		"jobs":                    "",
		"//evil.example":          "",
		"/\\evil.example":         "",
		"/x\\y":                   "",
		"https://evil.example/":   "",
		"javascript:alert(1)":     "",
		"/login":                  "",
		"/login?next=/":           "",
		"/jobs\n":                 "",
		"/%2F%2Fevil.example":     "/%2F%2Fevil.example", // a path on this server
		"/jobs#frag":              "/jobs#frag",
		strings.Repeat("/a", 2e3): "",
	} {
		if got := safeNext(next); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", next, got, want)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0: "0s", 45 * time.Second: "45s", 200 * time.Second: "3m 20s", 10 * time.Minute: "10m",
		2*time.Hour + 5*time.Minute: "2h 5m", 6 * time.Hour: "6h", 76 * time.Hour: "3d 4h", 24 * time.Hour: "1d",
		-90 * time.Second: "1m 30s",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestCommandLine(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		argv berth.Argv
		want string
	}{
		{berth.Argv{"sh", "-c", "echo hi | wc"}, "echo hi | wc"},
		{berth.Argv{"python", "train.py", "--name", "two words"}, `python train.py --name "two words"`},
		{berth.Argv{"echo", ""}, `echo ""`},
	} {
		if got := commandLine(tt.argv); got != tt.want {
			t.Errorf("commandLine(%q) = %q, want %q", tt.argv, got, tt.want)
		}
	}
}

func TestCapacity(t *testing.T) {
	t.Parallel()
	gpus := func(n int) []berth.GPU { return make([]berth.GPU, n) }
	workers := []*berth.Worker{
		{ID: "a", Host: "a", Queues: []string{"gpu"}, GPUs: gpus(8), State: berth.WorkerBusy, FaultyGPUs: []int{7}},
		{ID: "b", Host: "b", GPUs: gpus(4), State: berth.WorkerReady, // every queue, gpu turned off
			Controls: []*berth.WorkerControl{{Host: "b", Queue: "gpu", DesiredState: berth.DesiredOff, StopPolicy: berth.StopDrain}}},
		{ID: "c", Host: "c", Queues: []string{"gpu", "cpu"}, GPUs: gpus(2), State: berth.WorkerParked},
		{ID: "d", Host: "d", Queues: []string{"cpu"}, GPUs: gpus(2), State: berth.WorkerReady, // every queue off, cpu back on
			Controls: []*berth.WorkerControl{
				{Host: "d", Queue: berth.AllQueues, DesiredState: berth.DesiredOff, StopPolicy: berth.StopHard},
				{Host: "d", Queue: "cpu", DesiredState: berth.DesiredOn, StopPolicy: berth.StopHard}}},
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := &controller.Metrics{
		QueueDepth:    map[string]int{"gpu": 3, "big": 1},
		OldestPending: map[string]time.Time{"gpu": t0.Add(time.Minute), "big": t0},
		GPUsInUse:     map[string]int{"a": 5, "b": 1},
	}
	rows, total := capacity(workers, m)
	want := []queueRow{
		{Queue: "big", Workers: 1, GPUs: 4, Busy: 1, Free: 3, Depth: 1, Oldest: t0},
		{Queue: "cpu", Workers: 2, GPUs: 6, Busy: 1, Free: 5, Off: 2},
		{Queue: "default", Workers: 1, GPUs: 4, Busy: 1, Free: 3},
		{Queue: "gpu", Workers: 1, GPUs: 7, Busy: 5, Free: 2, Off: 7, Depth: 3, Oldest: t0.Add(time.Minute)},
	}
	if len(rows) != len(want) {
		t.Fatalf("rows = %+v, want %+v", rows, want)
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("row %d = %+v, want %+v", i, rows[i], want[i])
		}
	}
	wantTotal := queueRow{Queue: "all queues", Workers: 3, GPUs: 13, Busy: 6, Free: 7, Off: 3, Depth: 4, Oldest: t0}
	if total != wantTotal {
		t.Errorf("total = %+v, want %+v", total, wantTotal)
	}
}

func TestGPULoad(t *testing.T) {
	t.Parallel()
	got := gpuLoad([]berth.GPUStat{{Index: 0, Utilization: 57, MemoryUsed: 1 << 30}, {Index: 1, Utilization: 3}})
	if want := "GPU 0: 57%, 1GiB used; GPU 1: 3%, 0 used"; got != want {
		t.Errorf("gpuLoad = %q, want %q", got, want)
	}
}

func TestMeanUtilization(t *testing.T) {
	t.Parallel()
	if got := meanUtilization([]*berth.Worker{{}, {}}); got != -1 {
		t.Errorf("with no GPU reporting its load: %d, want -1", got)
	}
	workers := []*berth.Worker{
		{GPUStats: []berth.GPUStat{{Index: 0, Utilization: 90}, {Index: 1, Utilization: 30}}},
		{}, // declared GPUs: none reported
		{GPUStats: []berth.GPUStat{{Index: 0, Utilization: 0}}},
	}
	if got := meanUtilization(workers); got != 40 {
		t.Errorf("mean utilization = %d, want 40", got)
	}
}
