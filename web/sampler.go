package web

import (
	"context"
	"fmt"
	"html"
	"html/template"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth"
)

// sample is one reading of the cluster for the overview's plots.
type sample struct {
	Time     time.Time
	Busy     int // GPUs held by active attempts on workers that take work
	Capacity int // GPUs of the workers that take work
	Depth    int // pending jobs, every queue
	Finished int // jobs that ever ended (succeeded, failed, cancelled)
	// Util is the mean utilization, in percent, of the GPUs whose agents
	// report their load (nvidia-smi); -1 when none does (declared GPUs).
	Util int
}

// ring keeps the newest samples, a fixed number at most. It is safe for
// concurrent use.
type ring struct {
	mu   sync.Mutex
	buf  []sample
	next int // where the next sample goes
	full bool
}

func newRing(size int) *ring { return &ring{buf: make([]sample, max(size, 2))} }

func (r *ring) add(s sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf[r.next] = s
	r.next = (r.next + 1) % len(r.buf)
	if r.next == 0 {
		r.full = true
	}
}

// since returns the samples taken at or after t, oldest first.
func (r *ring) since(t time.Time) []sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sample
	add := func(list []sample) {
		for _, s := range list {
			if !s.Time.Before(t) {
				out = append(out, s)
			}
		}
	}
	if r.full {
		add(r.buf[r.next:])
	}
	add(r.buf[:r.next])
	return out
}

// finished counts the jobs that ever ended in counts.
func finished(counts map[berth.JobState]int) int {
	return counts[berth.JobSucceeded] + counts[berth.JobFailed] + counts[berth.JobCancelled]
}

// sample records one reading from the controller.
func (h *Handler) sample(ctx context.Context) error {
	if h.cfg.Ctl == nil {
		return nil
	}
	m, err := h.cfg.Ctl.Metrics(ctx)
	if err != nil {
		return fmt.Errorf("read metrics: %w", err)
	}
	workers, err := h.cfg.Ctl.Workers(ctx)
	if err != nil {
		return fmt.Errorf("read workers: %w", err)
	}
	_, total := capacity(workers, m)
	depth := 0
	for _, n := range m.QueueDepth {
		depth += n
	}
	h.samples.add(sample{Time: h.cfg.Now(), Busy: total.Busy, Capacity: total.GPUs, Depth: depth, Finished: finished(m.Jobs),
		Util: meanUtilization(workers)})
	return nil
}

// meanUtilization is the mean utilization, in percent, of every GPU whose
// agent reported its load at its last heartbeat; -1 when none did.
func meanUtilization(workers []*berth.Worker) int {
	sum, n := 0, 0
	for _, w := range workers {
		for _, s := range w.GPUStats {
			sum, n = sum+s.Utilization, n+1
		}
	}
	if n == 0 {
		return -1
	}
	return sum / n
}

// throughput is the jobs finished per minute over the window before now,
// from the oldest sample in it to the count now; ok is false when no
// sample is at least a tenth of the window old.
func throughput(samples []sample, now time.Time, finishedNow int, window time.Duration) (perMinute float64, ok bool) {
	for _, s := range samples {
		if s.Time.Before(now.Add(-window)) {
			continue
		}
		span := now.Sub(s.Time)
		if span < window/10 || span <= 0 {
			return 0, false
		}
		return float64(finishedNow-s.Finished) / span.Minutes(), true
	}
	return 0, false
}

// plot draws one series of samples between from and to as an SVG line
// chart with its axes labelled, a title and a text summary for screen
// readers. With no samples it says so instead.
func plot(id, title, unit string, samples []sample, value func(sample) int, from, to time.Time) template.HTML {
	if len(samples) == 0 {
		return template.HTML(`<p class="muted">` + html.EscapeString(title) + `: no samples yet (the server records one every 30 s).</p>`)
	}
	const (
		w, hgt               = 640, 180
		left, right, top, bt = 48, 12, 12, 28
	)
	pts := points(samples, value, maxPoints)
	peak, last := 0, pts[len(pts)-1].v
	for _, p := range pts {
		peak = max(peak, p.v)
	}
	ymax := niceCeil(peak)
	span := to.Sub(from).Seconds()
	if span <= 0 {
		span = 1
	}
	x := func(t time.Time) float64 { return left + (w-left-right)*t.Sub(from).Seconds()/span }
	y := func(v int) float64 { return top + (hgt-top-bt)*(1-float64(v)/float64(ymax)) }
	var line strings.Builder
	for i, p := range pts {
		if i > 0 {
			line.WriteByte(' ')
		}
		fmt.Fprintf(&line, "%.1f,%.1f", x(p.t), y(p.v))
	}
	summary := fmt.Sprintf("%s over the last %s: now %d %s, peak %d.", title, formatDuration(to.Sub(from)), last, unit, peak)
	var b strings.Builder
	fmt.Fprintf(&b, `<figure class="plot"><svg id="%s" viewBox="0 0 %d %d" role="img" aria-labelledby="%s-t %s-d">`, id, w, hgt, id, id)
	fmt.Fprintf(&b, `<title id="%s-t">%s</title><desc id="%s-d">%s</desc>`, id, html.EscapeString(title), id, html.EscapeString(summary))
	ticks := []int{0, ymax}
	if ymax%2 == 0 {
		ticks = []int{0, ymax / 2, ymax}
	}
	for _, v := range ticks {
		fmt.Fprintf(&b, `<line class="grid" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`, left, y(v), w-right, y(v))
		fmt.Fprintf(&b, `<text class="axis" x="%d" y="%.1f" text-anchor="end">%d</text>`, left-6, y(v)+4, v)
	}
	fmt.Fprintf(&b, `<text class="axis" x="%d" y="%d" text-anchor="start">-%s</text>`, left, hgt-8, formatDuration(to.Sub(from)))
	fmt.Fprintf(&b, `<text class="axis" x="%d" y="%d" text-anchor="end">now</text>`, w-right, hgt-8)
	if len(pts) == 1 {
		fmt.Fprintf(&b, `<circle class="dot" cx="%.1f" cy="%.1f" r="3"/>`, x(pts[0].t), y(last))
	} else {
		fmt.Fprintf(&b, `<polyline class="line" points="%s"/>`, line.String())
	}
	fmt.Fprintf(&b, `</svg><figcaption>%s</figcaption></figure>`, html.EscapeString(summary))
	return template.HTML(b.String())
}

// maxPoints bounds the points a plot draws: a day of 30 s samples is
// reduced to the peak of each stretch.
const maxPoints = 720

type point struct {
	t time.Time
	v int
}

// points are the values of samples, at most limit of them: when there
// are more, each point is the peak of a run of consecutive samples, at
// the run's last time.
func points(samples []sample, value func(sample) int, limit int) []point {
	per := (len(samples) + limit - 1) / limit
	out := make([]point, 0, min(len(samples), limit))
	for i := 0; i < len(samples); i += per {
		end := min(i+per, len(samples))
		p := point{t: samples[end-1].Time}
		for _, s := range samples[i:end] {
			p.v = max(p.v, value(s))
		}
		out = append(out, p)
	}
	return out
}

// niceCeil rounds n up to 1, 2 or 5 times a power of ten (at least 1), so
// the axis reads well.
func niceCeil(n int) int {
	if n <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(float64(n))))
	for _, m := range []float64{1, 2, 5, 10} {
		if v := int(m * p); v >= n {
			return v
		}
	}
	return n
}
