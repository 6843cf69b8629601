package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/audit"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/client"
	"github.com/berth-dev/berth/devca"
)

// demoScript is the demo job: it shows what a job sees.
const demoScript = `echo "hello from Berth: job $BERTH_JOB_ID, attempt $BERTH_ATTEMPT_ID on $BERTH_HOST"
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
	demo := fs.Bool("demo", true, "submit a demo job and show its output on the first start in a data dir (--demo: on a later start too; --demo=false: never)")
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
	admin, tlsConfig, err := m.saveLocalCLI(rs, dataDir)
	if err != nil {
		_ = rs.Close(ctx)
		return err
	}

	if acfg.Watchdog, err = watchdogArgv(); err != nil {
		_ = rs.Close(ctx)
		return err
	}
	local := newLocalAgents()
	defer local.stop()
	hostname, _ := os.Hostname()
	for i := 1; i <= n; i++ {
		c := acfg
		c.Server, c.TLS, c.Version, c.Log = rs.URL, tlsConfig, Version, cfg.Log
		c.DataDir = filepath.Join(cfg.DataDir, "agents", strconv.Itoa(i))
		c.Host = fmt.Sprintf("%s-%d", hostname, i)
		err := localCredential(ctx, rs, c.DataDir, c.Host)
		var a *agent.Agent
		if err == nil {
			a, err = agent.New(c)
		}
		if err != nil {
			local.stop()
			_ = rs.Close(ctx)
			return err
		}
		local.run(m, a, c.Host)
		select {
		case <-a.Registered():
		case <-time.After(10 * time.Second):
			local.stop()
			_ = rs.Close(ctx)
			return fmt.Errorf("local agent %d did not register within 10s", i)
		}
		fmt.Fprintf(m.Stdout, "agent %s: %s, %d slots\n", c.Host, berth.Count(len(c.GPUs), "GPU"), c.Slots)
	}
	// A later start in the same data dir skips the demo unless asked: it
	// would add a demo job to the list at each start.
	firstStart := rs.AdminToken != ""
	if *demo && (firstStart || givenFlags(fs)["demo"]) {
		if err := runDemo(ctx, m, client.New(rs.URL, admin, tlsConfig), len(acfg.GPUs) > 0, dataDir); err != nil {
			fmt.Fprintln(m.Stderr, "berth: demo job:", err)
		}
	}
	fmt.Fprintf(m.Stdout, "\nReady. The dashboard is at %s/ — in another terminal:\n  export BERTH_SERVER=%s\n  berth submit -- echo hello\n  berth jobs\n  berth workers\nCtrl-C stops the server and agents.\n", rs.URL, rs.URL)
	return rs.serve(local.stoppedAfter(ctx))
}

// localAgents are the agents berth up runs in its own process.
type localAgents struct {
	ctx    context.Context // the agents': ends when they are to stop
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newLocalAgents() *localAgents {
	ctx, cancel := context.WithCancel(context.Background())
	return &localAgents{ctx: ctx, cancel: cancel}
}

// run runs a, the agent of host, until stop.
func (la *localAgents) run(m *Main, a *agent.Agent, host string) {
	la.wg.Add(1)
	go func() {
		defer la.wg.Done()
		if err := a.Run(la.ctx); err != nil {
			fmt.Fprintf(m.Stderr, "berth: local agent %s stopped: %v\n", host, err)
		}
	}()
}

// stop stops the agents and waits for them: each stops its attempts and
// reports them to the server, which must still serve meanwhile (a bounded
// wait: an agent gives up on an unreachable server). It may be called
// more than once.
func (la *localAgents) stop() {
	la.cancel()
	la.wg.Wait()
}

// stoppedAfter returns a context that ends once ctx has ended and the
// agents have then stopped, for the server to serve until then: the
// server must outlive its agents' last reports.
func (la *localAgents) stoppedAfter(ctx context.Context) context.Context {
	serving, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	context.AfterFunc(ctx, func() {
		la.stop()
		stopServing()
	})
	return serving
}

// saveLocalCLI saves, for the CLI on this machine, the admin token of the
// data dir and the development CA, if any, and says so; it returns them.
func (m *Main) saveLocalCLI(rs *runningServer, dataDir string) (string, *tls.Config, error) {
	var tlsConfig *tls.Config
	if rs.CAFile != "" {
		var err error
		if tlsConfig, err = devca.ClientConfig(rs.CAFile, ""); err != nil {
			return "", nil, err
		}
		fmt.Fprintf(m.Stdout, "TLS: development CA %s, fingerprint %s\n", rs.CAFile, rs.Fingerprint)
	}
	data, err := os.ReadFile(filepath.Join(dataDir, adminTokenFile))
	if err != nil {
		return "", nil, fmt.Errorf("admin token: %w (it was saved there at the first start; delete the data dir to start afresh)", err)
	}
	admin := strings.TrimSpace(string(data))
	path, err := m.saveServer(rs.URL, savedServer{Token: admin, CA: rs.CAFile, Fingerprint: rs.Fingerprint})
	if err != nil {
		return "", nil, err
	}
	if rs.AdminToken != "" {
		fmt.Fprintf(m.Stdout, "first admin token (also in %s and, for the CLI, in %s):\n  %s\n",
			filepath.Join(dataDir, adminTokenFile), path, rs.AdminToken)
	} else {
		fmt.Fprintf(m.Stdout, "admin token for the CLI saved in %s\n", path)
	}
	return admin, tlsConfig, nil
}

// localCredential gives a local agent a credential of its own, bound to
// host, unless its data dir has one.
func localCredential(ctx context.Context, rs *runningServer, dataDir, host string) error {
	if saved, err := agent.SavedCredential(dataDir); err != nil || saved != "" {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return fmt.Errorf("agent data dir: %w", err)
	}
	issued, err := rs.Tokens.Issue(ctx, auth.Grant{Name: host, Role: auth.RoleAgent, Worker: host, By: "berth up"},
		func(t *berth.Token) error {
			return rs.sec.audit.Append(audit.Entry{Action: "agent.joined", Actor: "berth up", Target: "token/" + t.ID,
				Fields: map[string]string{"name": t.Name, "role": t.Role, "worker": t.Worker}})
		})
	if err != nil {
		return err
	}
	return agent.SaveCredential(dataDir, issued.Secret)
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
	if err := c.Logs(ctx, id, client.LogOptions{Follow: true}, m.Stdout); err != nil {
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
