package agent

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

func TestValidModel(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"m", "meta-llama/Llama-3-8B", "org/it's-m2", strings.Repeat("é", 128)} {
		if err := ValidModel("models", ok); err != nil {
			t.Errorf("ValidModel(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("m", 129), "a,b", "a b", "a\tb", "a\nb", "a\x00b", "\xff"} {
		err := ValidModel("models", bad)
		if e, ok := err.(*berth.Error); !ok || e.Field != "models" {
			t.Errorf("ValidModel(%q) = %v, want an error naming models", bad, err)
		}
	}
}

func TestNewRejectsBadModels(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Server: "http://127.0.0.1:1", DataDir: t.TempDir(), Host: "box", Models: []string{"m1", "a b"}})
	if err == nil || !strings.Contains(err.Error(), "models") {
		t.Fatalf("New with model %q: err = %v, want one naming models", "a b", err)
	}
}

// TestAgentReportsModels checks that the models the agent starts with are
// in its register and heartbeats, sorted.
func TestAgentReportsModels(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	a, _ := startAgent(t, fs, func(c *Config) { c.Models = []string{"m2", "m1"} })
	want := []string{"m1", "m2"}
	reg := fs.await("register", func(m wire.Message) bool { _, ok := m.Body.(*wire.Register); return ok }).Body.(*wire.Register)
	if !slices.Equal(reg.Models, want) {
		t.Errorf("register models = %q, want %q", reg.Models, want)
	}
	if hb := fs.nextHeartbeat(); !slices.Equal(hb.Models, want) {
		t.Errorf("heartbeat models = %q, want %q", hb.Models, want)
	}
	if got := a.Models(); !slices.Equal(got, want) {
		t.Errorf("Models() = %q, want %q", got, want)
	}
}

// TestAgentWarmsModelOfSucceededAttempt checks that the model of an
// attempt that succeeded is reported warm, and that of one that failed is
// not.
func TestAgentWarmsModelOfSucceededAttempt(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	a, _ := startAgent(t, fs, nil)
	fs.assign(&wire.JobAssign{AttemptID: "a-fail", Command: []string{"false"}, Model: "m2"})
	checkResult(t, fs.result("a-fail"), berth.AttemptFailed, "", intp(1), "exit code 1")
	if hb := fs.nextHeartbeat(); len(hb.Models) != 0 {
		t.Errorf("after a failed attempt for m2, heartbeat models = %q, want none", hb.Models)
	}
	fs.assign(&wire.JobAssign{AttemptID: "a-ok", Command: []string{"true"}, Model: "m1"})
	checkResult(t, fs.result("a-ok"), berth.AttemptSucceeded, "", intp(0), "")
	if hb := fs.nextHeartbeat(); !slices.Equal(hb.Models, []string{"m1"}) {
		t.Errorf("after a successful attempt for m1, heartbeat models = %q, want [m1]", hb.Models)
	}
	if got := a.Models(); !slices.Equal(got, []string{"m1"}) {
		t.Errorf("Models() = %q, want [m1]", got)
	}
}

// prewarmAgent starts an agent whose prewarm command is script (with
// {model} in it), logging at debug level; it returns the agent's logs and
// a file path for script to write to.
func prewarmAgent(t *testing.T, fs *fakeServer, script string, configure func(*Config)) (*Agent, *lockedBuffer, string) {
	t.Helper()
	runs := filepath.Join(t.TempDir(), "runs")
	logs := &lockedBuffer{}
	a, _ := startAgent(t, fs, func(c *Config) {
		c.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		if script != "" {
			c.Prewarm = strings.ReplaceAll(script, "RUNS", berth.ShellQuote(runs))
		}
		if configure != nil {
			configure(c)
		}
	})
	return a, logs, runs
}

// readRuns returns what the prewarm commands wrote to runs.
func readRuns(t *testing.T, runs string) string {
	t.Helper()
	data, err := os.ReadFile(runs)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(data)
}

// TestAgentPrewarm checks that a hint runs the prewarm command with the
// model's name, quoted for the shell, and that the model is then warm.
func TestAgentPrewarm(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	const model = "org/it's-m2"
	a, _, runs := prewarmAgent(t, fs, `printf '%s\n' {model} >> RUNS`, nil)
	fs.send(wire.TypePrewarmHint, &wire.PrewarmHint{Model: model})
	fs.await("heartbeat with "+model, func(m wire.Message) bool {
		hb, ok := m.Body.(*wire.Heartbeat)
		return ok && slices.Equal(hb.Models, []string{model})
	})
	if got := readRuns(t, runs); got != model+"\n" {
		t.Errorf("the prewarm command wrote %q, want %q", got, model+"\n")
	}
	if got := a.Models(); !slices.Equal(got, []string{model}) {
		t.Errorf("Models() = %q, want [%s]", got, model)
	}
}

// TestAgentPrewarmFailure checks that a model whose prewarm command fails
// is not reported warm, and that a later hint tries again.
func TestAgentPrewarmFailure(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	a, logs, runs := prewarmAgent(t, fs, `printf '%s\n' {model} >> RUNS; exit 3`, nil)
	for i := 1; i <= 2; i++ {
		fs.send(wire.TypePrewarmHint, &wire.PrewarmHint{Model: "m2"})
		logs.await(t, `msg="prewarm failed" model=m2 reason="exit code 3"`, i)
		if hb := fs.nextHeartbeat(); len(hb.Models) != 0 {
			t.Errorf("after a failed prewarm, heartbeat models = %q, want none", hb.Models)
		}
	}
	if got := readRuns(t, runs); got != "m2\nm2\n" {
		t.Errorf("the prewarm command wrote %q, want two runs for m2", got)
	}
	if got := a.Models(); len(got) != 0 {
		t.Errorf("Models() = %q, want none", got)
	}
}

// TestAgentPrewarmTimeout checks that a prewarm command past
// PrewarmTimeout is stopped and its model not reported warm.
func TestAgentPrewarmTimeout(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	a, logs, _ := prewarmAgent(t, fs, `exec sleep 60 # {model}`, func(c *Config) { c.PrewarmTimeout = 100 * time.Millisecond })
	fs.send(wire.TypePrewarmHint, &wire.PrewarmHint{Model: "m2"})
	logs.await(t, `msg="prewarm failed" model=m2 reason="max_runtime exceeded (100ms)"`, 1)
	if got := a.Models(); len(got) != 0 {
		t.Errorf("Models() = %q, want none", got)
	}
}

// TestAgentIgnoresHintWithoutPrewarm checks that an agent with no prewarm
// command runs nothing for a hint.
func TestAgentIgnoresHintWithoutPrewarm(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	a, logs, _ := prewarmAgent(t, fs, "", nil)
	fs.send(wire.TypePrewarmHint, &wire.PrewarmHint{Model: "m2"})
	logs.await(t, `msg="prewarm hint ignored: no prewarm command" model=m2`, 1)
	if hb := fs.nextHeartbeat(); len(hb.Models) != 0 {
		t.Errorf("heartbeat models = %q, want none", hb.Models)
	}
	if _, err := os.Stat(filepath.Join(a.cfg.DataDir, prewarmLog)); !os.IsNotExist(err) {
		t.Errorf("a prewarm ran without a prewarm command: %s: %v", prewarmLog, err)
	}
}

// TestAgentPrewarmsOnce checks that a hint for a model already warm, or
// already being prewarmed, runs nothing.
func TestAgentPrewarmsOnce(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	gate := filepath.Join(t.TempDir(), "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	_, logs, runs := prewarmAgent(t, fs, `printf '%s\n' {model} >> RUNS; read line < `+berth.ShellQuote(gate),
		func(c *Config) { c.Models = []string{"m1"} })
	fs.send(wire.TypePrewarmHint, &wire.PrewarmHint{Model: "m1"})
	logs.await(t, `msg="prewarm hint ignored: model already warm" model=m1`, 1)
	fs.send(wire.TypePrewarmHint, &wire.PrewarmHint{Model: "m2"})
	fs.send(wire.TypePrewarmHint, &wire.PrewarmHint{Model: "m2"})
	logs.await(t, `msg="prewarm hint ignored: model already being prewarmed" model=m2`, 1)
	// Opening the gate waits for the first prewarm of m2 to read it.
	f, err := os.OpenFile(gate, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("go\n"); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	fs.await("heartbeat with m1 and m2", func(m wire.Message) bool {
		hb, ok := m.Body.(*wire.Heartbeat)
		return ok && slices.Equal(hb.Models, []string{"m1", "m2"})
	})
	if got := readRuns(t, runs); got != "m2\n" {
		t.Errorf("the prewarm command wrote %q, want one run, for m2", got)
	}
}
