package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
)

// exitNoCode is berth run's exit status when the job ended without an
// exit code of its own: cancelled (by someone else), lost with its
// worker, or killed by a signal.
const exitNoCode = 125

// runUsage is berth run's help text before its flags.
const runUsage = `[flags] -- COMMAND ARGS...

Submits one job (the flags are berth submit's), prints its output as it runs
and exits with the job's exit code, as srun does: the job's stdout goes to
stdout and its stderr to stderr; each line of a gang's (--nodes N) begins
with its rank, "[0] ", "[1] "…; a retry's output follows a line "berth:
attempt N" on stderr. The exit status is 0 when the job succeeded, the job's
own exit code when it failed, 125 when it ended without one (cancelled by
someone else, lost with its worker, killed by a signal), 130 when you
interrupted it, 124 when no server answered for 2 minutes (the job perhaps
still running), 2 when the job was refused.

Ctrl-C cancels the job and goes on printing its output until it has ended;
a second Ctrl-C stops waiting at once (the job is still being cancelled).
--detach prints the job's id and returns, as berth submit does.`

func runRun(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("run", runUsage)
	cf := m.addClientFlags(fs, true)
	detach := fs.Bool("detach", false, "print the job's id and return, as berth submit does")
	jf := defineSubmitFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	if cf.output == "json" && !*detach {
		return berth.Invalidf("-o", "json goes with --detach: attached, berth run prints the job's own output")
	}
	req, err := jf.request(m, cf, "run", berth.KindBatch)
	if err != nil {
		return err
	}
	if req.Array > 0 {
		return berth.Invalidf("--array", "berth run runs one job: submit an array with berth submit --array")
	}
	if req.Kind == berth.KindService {
		return berth.Invalidf("kind", "berth run waits for a batch job to end; a service runs until stopped: berth serve")
	}
	c := m.client(cf)
	submitCtx := ctx
	if !*detach {
		// A Ctrl-C while the submission is on its way cancels the job
		// once it is in: attach sees ctx ended.
		submitCtx = context.WithoutCancel(ctx)
	}
	sub, err := c.SubmitFull(submitCtx, req, cf.output != "json")
	if err != nil {
		return err
	}
	m.noteReplay(req, sub.Replayed)
	if *detach {
		return m.printSubmission(ctx, c, sub, cf.output == "json", false)
	}
	for _, w := range sub.Warnings {
		fmt.Fprintf(m.Stderr, "berth: warning: %s\n", w)
	}
	return m.attach(ctx, c, sub.IDs[0], req.Nodes > 1)
}

// attach prints job id's output until it ends and returns its outcome as
// berth run's exit (jobExit). When ctx ends (Ctrl-C) it cancels the job
// and goes on printing; a second interrupt (SIGINT or SIGTERM) stops it at
// once with exit 130.
func (m *Main) attach(ctx context.Context, c *client.Client, id string, gang bool) error {
	var mu sync.Mutex // the output, written by the stream and by the interrupt's notes
	p := &outputPrinter{stdout: m.Stdout, stderr: m.Stderr, gang: gang, partial: map[lineKey][]byte{}}
	note := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(m.Stderr, "berth: "+format+"\n", args...)
	}
	c.Retry.Notify = func(err error) { note("%v; trying again for up to %s", err, client.DefaultRetryFor) }

	streamCtx, stopStream := context.WithCancel(context.WithoutCancel(ctx))
	defer stopStream()
	streamed := make(chan struct{})
	var interrupted, detached bool // set by the goroutine below, read once it is done
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-ctx.Done():
		case <-streamed:
			return
		}
		interrupted = true
		// The first interrupt ended ctx and gave the signals their default
		// effect back (stopOnSignal): take the second one here instead.
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(sigs)
		note("cancelling job %s; Ctrl-C again to stop waiting (it stays cancelled)", id)
		if _, err := c.Cancel(streamCtx, id); err != nil {
			note("cancel %s: %s", id, errorLine(err))
		}
		select {
		case <-sigs:
			detached = true
			stopStream()
		case <-streamed:
		}
	})
	started := make(chan struct{})
	var once sync.Once
	wg.Go(func() { waitNotes(streamCtx, c, id, started, note) })
	err := c.LogRecords(streamCtx, id, true, func(rec *berth.LogRecord) error {
		once.Do(func() { close(started) })
		mu.Lock()
		defer mu.Unlock()
		return p.print(rec)
	})
	once.Do(func() { close(started) })
	close(streamed)
	wg.Wait()
	p.flush()
	if detached {
		return &exitError{code: exitStopped, msg: fmt.Sprintf("stopped waiting for job %s, which is being cancelled", id)}
	}
	if err != nil {
		return gaveUp(err, fmt.Sprintf("job %s may still be running (berth logs -f %s)", id, id))
	}
	d, err := c.Job(streamCtx, id)
	if err != nil {
		return err
	}
	return jobExit(d.Job, interrupted)
}

// pendingNoteEvery is how often berth run looks at a job that has printed
// nothing yet, to say why it waits.
const pendingNoteEvery = 2 * time.Second

// waitNotes says on stderr why job id waits, as srun says a job is queued:
// when it is still pending a moment after the submit, and again whenever
// the reason changes, until it prints its first output (started closes),
// leaves pending or ctx ends.
func waitNotes(ctx context.Context, c *client.Client, id string, started <-chan struct{}, note func(string, ...any)) {
	tick := time.NewTicker(pendingNoteEvery)
	defer tick.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-started:
			return
		case <-tick.C:
		}
		d, err := c.Job(ctx, id)
		if err != nil || d.State != berth.JobPending {
			return
		}
		if reason := orDash(d.Reason); reason != last {
			last = reason
			note("job %s is pending: %s", id, reason)
		}
	}
}

// jobExit is berth run's exit for job j, which has ended: nil when it
// succeeded; the job's exit code when it failed with one; exitStopped when
// it was cancelled after the user interrupted berth run; otherwise
// exitNoCode. The message says how the job ended.
func jobExit(j *berth.Job, interrupted bool) error {
	how := fmt.Sprintf("job %s %s", j.ID, j.State)
	if j.Reason != "" {
		how += ": " + j.Reason
	}
	switch {
	case j.State == berth.JobSucceeded:
		return nil
	case j.State == berth.JobFailed && j.ExitCode != nil && *j.ExitCode > 0 && *j.ExitCode < 256:
		if !strings.Contains(j.Reason, "exit code") {
			how += fmt.Sprintf(" (exit code %d)", *j.ExitCode)
		}
		return &exitError{code: *j.ExitCode, msg: how}
	case j.State == berth.JobCancelled && interrupted:
		return &exitError{code: exitStopped, msg: how}
	}
	return &exitError{code: exitNoCode, msg: how + " (no exit code of its own)"}
}

// lineKey names a gang member's stream.
type lineKey struct {
	rank   int
	stream string
}

// outputPrinter writes a job's output records to stdout or stderr, by the
// stream each was written to. A gang's lines are written whole, each after
// its rank ("[1] "); a line not yet ended waits in partial for the rest.
type outputPrinter struct {
	stdout, stderr io.Writer
	gang           bool
	partial        map[lineKey][]byte
	placement      int // the placement whose output is being printed
}

// print writes rec; a record of a later placement (a retry) is introduced
// by a line "berth: attempt N" on stderr.
func (p *outputPrinter) print(rec *berth.LogRecord) error {
	if rec.Placement > p.placement {
		if p.placement > 0 {
			p.flush()
			fmt.Fprintf(p.stderr, "berth: attempt %d\n", rec.Placement)
		}
		p.placement = rec.Placement
	}
	w := p.stdout
	if rec.Stream == berth.StreamStderr {
		w = p.stderr
	}
	if !p.gang {
		_, err := w.Write(rec.Data)
		return err
	}
	key := lineKey{rec.Rank, rec.Stream}
	data := append(p.partial[key], rec.Data...)
	var out []byte
	for {
		line, rest, ok := bytes.Cut(data, []byte("\n"))
		if !ok {
			break
		}
		out = fmt.Appendf(out, "[%d] %s\n", rec.Rank, line)
		data = rest
	}
	p.partial[key] = data
	if len(out) == 0 {
		return nil
	}
	_, err := w.Write(out)
	return err
}

// flush ends the lines that wait for the rest, each on its stream, by
// rank.
func (p *outputPrinter) flush() {
	keys := slices.SortedFunc(maps.Keys(p.partial), func(a, b lineKey) int {
		return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.stream, b.stream))
	})
	for _, key := range keys {
		if data := p.partial[key]; len(data) > 0 {
			w := p.stdout
			if key.stream == berth.StreamStderr {
				w = p.stderr
			}
			fmt.Fprintf(w, "[%d] %s\n", key.rank, data)
		}
	}
	clear(p.partial)
}
