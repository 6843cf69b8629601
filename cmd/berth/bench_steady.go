package main

import (
	"context"
	"fmt"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/client"
	"github.com/berth-dev/berth/controller"
)

// steadyShape is how berth bench --steady feeds the no-op executor. The
// command gives it river bench's numbers (cmd/river/riverbench, v0.43.0):
// a first backlog of 75,000 inserted before the clock starts, then batches
// of 5,000 until the backlog is back up, every 250 ms.
type steadyShape struct {
	duration time.Duration // how long the clock runs
	batch    int           // jobs per array submitted (River's insertBatchSize)
	backlog  int           // pending jobs the inserter keeps (River's minJobs)
	agents   int           // local agents, 1,024 slots each
}

// steadyEvery is how often the inserter looks at the backlog (River's
// inserter sleeps 250 ms between rounds).
const steadyEvery = 250 * time.Millisecond

// steadyRun is what one steady run measured.
type steadyRun struct {
	Worked   uint64        // jobs succeeded while the clock ran
	Inserted int           // jobs submitted, the first backlog included
	Elapsed  time.Duration // from the agents' start to the last count
}

// rate is the jobs worked a second.
func (r steadyRun) rate() float64 { return float64(r.Worked) / r.Elapsed.Seconds() }

// benchSteady runs the no-op executor the way river bench --duration runs
// River, so that the two figures compare: the server alone takes the first
// backlog, the agents start with the clock, and while they work an inserter
// keeps the backlog up with arrays of shape.batch jobs. The figure is the
// jobs the server counted succeeded while the clock ran.
func benchSteady(ctx context.Context, storeURL string, shape steadyShape) (steadyRun, error) {
	var run steadyRun
	err := withBenchServer(ctx, storeURL, func(rs *runningServer, c *client.Client, dir string) error {
		req := trueJob(dir)
		req.Array = shape.batch
		for run.Inserted < shape.backlog {
			if _, err := c.SubmitIDs(ctx, req); err != nil {
				return fmt.Errorf("insert the first backlog: %w", err)
			}
			run.Inserted += shape.batch
		}
		before, err := finished(ctx, rs.Ctl)
		if err != nil {
			return err
		}
		start := time.Now()
		stop, err := startBenchAgents(ctx, shape.agents, agent.Config{Server: rs.URL, DataDir: dir, Host: "bench", Slots: 1024,
			Executor: agent.NoopExecutor{}})
		if err != nil {
			return err
		}
		defer stop()
		ictx, stopInserting := context.WithCancel(ctx)
		inserted := make(chan error, 1)
		pending := func(ctx context.Context) (int, error) {
			m, err := rs.Ctl.Metrics(ctx)
			if err != nil {
				return 0, fmt.Errorf("read the server's counters: %w", err)
			}
			return m.Jobs[berth.JobPending], nil
		}
		submit := func(ctx context.Context) error {
			if _, err := c.SubmitIDs(ctx, req); err != nil {
				return err
			}
			run.Inserted += req.Array
			return nil
		}
		go func() { inserted <- keepBacklog(ictx, pending, submit, shape.backlog) }()
		select {
		case <-time.After(shape.duration):
		case err := <-inserted:
			stopInserting()
			return err
		}
		after, err := finished(ctx, rs.Ctl)
		run.Elapsed = time.Since(start)
		stopInserting()
		if ierr := <-inserted; err == nil {
			err = ierr
		}
		if err != nil {
			return err
		}
		if failed := after[berth.JobFailed] - before[berth.JobFailed]; failed > 0 {
			return fmt.Errorf("%d bench jobs failed", failed)
		}
		run.Worked = after[berth.JobSucceeded] - before[berth.JobSucceeded]
		return nil
	})
	return run, err
}

// keepBacklog calls submit every steadyEvery, as many times as it takes
// to bring pending back up to backlog, until ctx ends; then it returns nil.
func keepBacklog(ctx context.Context, pending func(context.Context) (int, error), submit func(context.Context) error, backlog int) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(steadyEvery):
		}
		for {
			n, err := pending(ctx)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return err
			}
			if n >= backlog {
				break
			}
			if err := submit(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("keep the backlog: %w", err)
			}
		}
	}
}

// finished returns the jobs ctl has seen end since it started, by state.
func finished(ctx context.Context, ctl *controller.Controller) (map[berth.JobState]uint64, error) {
	m, err := ctl.Metrics(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the server's counters: %w", err)
	}
	return m.Totals.JobsFinished, nil
}
