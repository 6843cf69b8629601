package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/client"
)

// demoScript is the demo job: it shows what a job sees.
const demoScript = `echo "hello from Berth: job $BERTH_JOB_ID, attempt $BERTH_ATTEMPT_ID on $(hostname)"
echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
for step in 1 2 3; do echo "training step $step/3"; done
echo "done"`

func runUp(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("up", "[flags]")
	var cfg serverConfig
	m.addServerFlags(fs, &cfg)
	var af agentFlags
	m.addAgentFlags(fs, &af)
	agents := fs.Int("agents", 0, "local agents to start (default 2, or 1 when nvidia-smi finds GPUs)")
	demo := fs.Bool("demo", true, "submit a demo job and show its output")
	if err := parse(fs, args); err != nil {
		return err
	}
	acfg, err := af.agentConfig(ctx)
	if err != nil {
		return err
	}
	n := *agents
	switch {
	case n < 0 || n > 64:
		return berth.Invalidf("--agents", "must be between 0 and 64")
	case n == 0 && af.gpus == "" && len(acfg.GPUs) > 0:
		n = 1 // real GPUs: one agent owns them all
	case n == 0:
		n = 2
	}
	cfg.Log = slog.New(slog.NewTextHandler(m.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rs, err := startServer(ctx, &cfg)
	if err != nil {
		return err
	}
	dataDir, _ := filepath.Abs(cfg.DataDir)
	fmt.Fprintf(m.Stdout, "berth server on %s (SQLite store in %s)\n", rs.URL, dataDir)

	agentCtx, stopAgents := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		stopAgents()
		wg.Wait()
	}()
	hostname, _ := os.Hostname()
	for i := 1; i <= n; i++ {
		c := acfg
		c.Server, c.Token, c.Version, c.Log = rs.URL, cfg.Token, Version, cfg.Log
		c.DataDir = filepath.Join(cfg.DataDir, "agents", strconv.Itoa(i))
		c.Host = fmt.Sprintf("%s-%d", hostname, i)
		a, err := agent.New(c)
		if err != nil {
			_ = rs.Close(ctx)
			return err
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = a.Run(agentCtx) }()
		select {
		case <-a.Registered():
		case <-time.After(10 * time.Second):
			_ = rs.Close(ctx)
			return fmt.Errorf("local agent %d did not register within 10s", i)
		}
		fmt.Fprintf(m.Stdout, "agent %s: %d GPUs, %d slots\n", c.Host, len(c.GPUs), c.Slots)
	}
	if *demo {
		if err := runDemo(ctx, m, client.New(rs.URL, cfg.Token), len(acfg.GPUs) > 0, dataDir); err != nil {
			fmt.Fprintln(m.Stderr, "berth: demo job:", err)
		}
	}
	fmt.Fprintf(m.Stdout, "\nReady. In another terminal:\n  export BERTH_SERVER=%s\n  berth submit -- echo hello\n  berth jobs\n  berth workers\nCtrl-C stops the server and agents.\n", rs.URL)
	err = rs.serve(ctx)
	stopAgents()
	wg.Wait()
	return err
}

// runDemo submits the demo job, streams its output and reports how it ended.
func runDemo(ctx context.Context, m *Main, c *client.Client, gpus bool, workdir string) error {
	req := berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
	req.Name, req.Command, req.Workdir, req.User = "demo", berth.Argv{"sh", "-c", demoScript}, workdir, m.Getenv("USER")
	if gpus {
		req.Resources.GPUs = 1
	}
	jobs, err := c.Submit(ctx, &req)
	if err != nil {
		return err
	}
	id := jobs[0].ID
	fmt.Fprintf(m.Stdout, "\ndemo job %s submitted; its output:\n", id)
	if err := c.Logs(ctx, id, true, m.Stdout); err != nil {
		return err
	}
	d, err := c.Job(ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "demo job %s %s on %s\n", id, d.State, lastHost(d))
	return nil
}

func lastHost(d *berth.JobDetail) string {
	if len(d.AttemptList) == 0 {
		return "-"
	}
	return d.AttemptList[len(d.AttemptList)-1].Host
}
