package agent

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// testSpec is a spec for cmd in a fresh directory, recording its group in
// a fresh journal.
func testSpec(t *testing.T, cmd ...string) Spec {
	t.Helper()
	root := t.TempDir()
	return specIn(t, root, openJournal(t, root), "a1", cmd...)
}

// specIn is a spec for attempt id under root, as the agent makes them.
func specIn(t *testing.T, root string, groups *GroupJournal, id string, cmd ...string) Spec {
	t.Helper()
	dir := filepath.Join(root, id)
	return Spec{AttemptID: id, JobID: "j1", Command: cmd, Dir: dir, LogPath: dir + ".log", Groups: groups}
}

func openJournal(t *testing.T, dir string) *GroupJournal {
	t.Helper()
	j, err := OpenGroupJournal(filepath.Join(dir, "groups"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func start(t *testing.T, s Spec) Process {
	t.Helper()
	p, err := ProcessExecutor{}.Start(context.Background(), s)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { p.Kill("", "") })
	return p
}

// await waits for p to end and returns its exit.
func await(t *testing.T, p Process) Exit {
	t.Helper()
	select {
	case <-p.Done():
		return p.Exit()
	case <-time.After(30 * time.Second):
		t.Fatal("attempt did not end within 30s")
		return Exit{}
	}
}

func run(t *testing.T, s Spec) (Exit, string) {
	t.Helper()
	ex := await(t, start(t, s))
	return ex, readFile(t, s.LogPath)
}

// waitForLog polls the log until it contains want (the child has reached
// that point of its script).
func waitForLog(t *testing.T, s Spec, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		data, _ := os.ReadFile(s.LogPath)
		if strings.Contains(string(data), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("log never contained %q; it has %q", want, data)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// readPgid returns the process group the journal records for a live
// attempt.
func readPgid(t *testing.T, s Spec) int {
	t.Helper()
	pgid, ok := s.Groups.Group(s.AttemptID)
	if !ok || pgid <= 1 {
		t.Fatalf("journal has no process group for %s (%d)", s.AttemptID, pgid)
	}
	return pgid
}

// assertDead checks that each pid is gone or a zombie: every process of the
// attempt has ended by the time it is Done.
func assertDead(t *testing.T, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		if processRunning(pid) {
			t.Errorf("process %d is still alive after Done", pid)
		}
	}
}

// awaitGroupGone polls until process group pgid no longer exists. Its
// members are dead when the attempt is Done, but orphans are reaped by
// init, which may take a while.
func awaitGroupGone(t *testing.T, pgid int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := syscall.Kill(-pgid, 0)
		if errors.Is(err, syscall.ESRCH) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still exists (kill -0: %v)", pgid, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func checkExit(t *testing.T, got Exit, state berth.AttemptState, code *int, reason string) {
	t.Helper()
	if got.State != state || got.Reason != reason || (got.ExitCode == nil) != (code == nil) ||
		(code != nil && *got.ExitCode != *code) {
		gotCode := "nil"
		if got.ExitCode != nil {
			gotCode = strconv.Itoa(*got.ExitCode)
		}
		wantCode := "nil"
		if code != nil {
			wantCode = strconv.Itoa(*code)
		}
		t.Fatalf("exit = {%s %s %q}, want {%s %s %q}", got.State, gotCode, got.Reason, state, wantCode, reason)
	}
}

func checkCause(t *testing.T, got Exit, cause string) {
	t.Helper()
	if got.Cause != cause {
		t.Fatalf("exit cause = %q, want %q (exit %+v)", got.Cause, cause, got)
	}
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		cmd    []string
		state  berth.AttemptState
		code   *int
		reason string
	}{
		{"true", []string{"true"}, berth.AttemptSucceeded, intp(0), ""},
		{"false", []string{"false"}, berth.AttemptFailed, intp(1), "exit code 1"},
		{"exit 42", []string{"sh", "-c", "exit 42"}, berth.AttemptFailed, intp(42), "exit code 42"},
		{"SIGKILL", []string{"sh", "-c", "kill -KILL $$"}, berth.AttemptFailed, nil, "killed by signal SIGKILL"},
		{"SIGTERM", []string{"sh", "-c", "kill -TERM $$"}, berth.AttemptFailed, nil, "killed by signal SIGTERM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ex, _ := run(t, testSpec(t, tc.cmd...))
			checkExit(t, ex, tc.state, tc.code, tc.reason)
		})
	}
}

func TestEnvironment(t *testing.T) {
	t.Parallel()
	s := testSpec(t, "sh", "-c", `echo "job=$BERTH_JOB_ID task=$BERTH_TASK_INDEX attempt=$BERTH_ATTEMPT_ID array=$BERTH_ARRAY_INDEX cuda=$CUDA_VISIBLE_DEVICES model=$MODEL path=${PATH:+set}"`+
		`; echo "name=$BERTH_JOB_NAME user=$BERTH_USER host=$BERTH_HOST n=$BERTH_ATTEMPT server=$BERTH_SERVER"`)
	s.JobID, s.AttemptID, s.TaskIndex, s.ArrayIndex = "job-7", "att-9", 3, intp(12)
	s.JobName, s.User, s.Host, s.Attempt = "train", "alice", "gpu-1", 2
	s.Server = "http://127.0.0.1:7070"
	s.GPUs = []int{0, 2}
	s.Env = map[string]string{"MODEL": "llama 3"}
	ex, out := run(t, s)
	checkExit(t, ex, berth.AttemptSucceeded, intp(0), "")
	want := "job=job-7 task=3 attempt=att-9 array=12 cuda=0,2 model=llama 3 path=set\nname=train user=alice host=gpu-1 n=2 server=http://127.0.0.1:7070\n"
	if out != want {
		t.Fatalf("child saw %q, want %q", out, want)
	}
}

// TestAgentsOwnBerthVariablesStayWithIt runs a job under an agent whose
// environment holds credentials: the job sees none of the agent's BERTH_
// variables, only Berth's own for it and those the job sets.
func TestAgentsOwnBerthVariablesStayWithIt(t *testing.T) {
	t.Setenv("BERTH_JOIN_TOKEN", "join-secret")
	t.Setenv("BERTH_TOKEN", "token-secret")
	t.Setenv("BERTH_SERVER", "http://head:7070")
	t.Setenv("BERTH_ARRAY_INDEX", "99")
	t.Setenv("AGENT_OWN", "kept")
	s := testSpec(t, "sh", "-c", `env | grep -E '^(BERTH_|AGENT_OWN=)' | sort`)
	s.Server = "http://head:7070"
	s.Env = map[string]string{"BERTH_SERVER": "http://set-by-the-job:7070"}
	ex, out := run(t, s)
	checkExit(t, ex, berth.AttemptSucceeded, intp(0), "")
	want := "AGENT_OWN=kept\nBERTH_ATTEMPT_ID=" + s.AttemptID + "\nBERTH_JOB_ID=" + s.JobID +
		"\nBERTH_SERVER=http://set-by-the-job:7070\nBERTH_TASK_INDEX=" + strconv.Itoa(s.TaskIndex) + "\n"
	if out != want {
		t.Fatalf("child saw:\n%s\nwant:\n%s", out, want)
	}
}

func TestEnvironmentWithoutArrayOrGPUs(t *testing.T) {
	t.Parallel()
	s := testSpec(t, "sh", "-c", `echo "array=${BERTH_ARRAY_INDEX-unset} cuda=${CUDA_VISIBLE_DEVICES-unset}."`)
	ex, out := run(t, s)
	checkExit(t, ex, berth.AttemptSucceeded, intp(0), "")
	if want := "array=unset cuda=.\n"; out != want {
		t.Fatalf("child saw %q, want %q (CUDA_VISIBLE_DEVICES set and empty)", out, want)
	}
}

func TestJobPATH(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	target := ""
	for _, p := range []string{"/bin/true", "/usr/bin/true"} {
		if _, err := os.Stat(p); err == nil {
			target = p
			break
		}
	}
	if target == "" {
		t.Fatal("no true binary in /bin or /usr/bin")
	}
	if err := os.Symlink(target, filepath.Join(bin, "berth-test-tool")); err != nil {
		t.Fatal(err)
	}
	s := testSpec(t, "berth-test-tool")
	s.Env = map[string]string{"PATH": "relative:" + bin}
	ex, _ := run(t, s)
	checkExit(t, ex, berth.AttemptSucceeded, intp(0), "")

	s = testSpec(t, "berth-test-tool")
	s.Env = map[string]string{"PATH": t.TempDir()}
	ex, _ = run(t, s)
	checkExit(t, ex, berth.AttemptFailed, intp(127), `start: exec: "berth-test-tool": executable file not found in $PATH`)
}

func TestLogHasStdoutAndStderrAppended(t *testing.T) {
	t.Parallel()
	s := testSpec(t, "sh", "-c", "echo out; echo err >&2; echo out2")
	ex, out := run(t, s)
	checkExit(t, ex, berth.AttemptSucceeded, intp(0), "")
	if want := "out\nerr\nout2\n"; out != want {
		t.Fatalf("log = %q, want %q", out, want)
	}
	s.Command = []string{"sh", "-c", "echo again >&2"}
	ex, out = run(t, s)
	checkExit(t, ex, berth.AttemptSucceeded, intp(0), "")
	if want := "out\nerr\nout2\nagain\n"; out != want {
		t.Fatalf("log after a second run = %q, want %q (appended)", out, want)
	}
}

func TestWorkdir(t *testing.T) {
	t.Parallel()
	wd := t.TempDir()
	s := testSpec(t, "pwd")
	s.Workdir = wd
	if _, out := run(t, s); strings.TrimSpace(out) != wd {
		t.Fatalf("pwd = %q, want %q", out, wd)
	}
	s = testSpec(t, "pwd")
	if _, out := run(t, s); strings.TrimSpace(out) != s.Dir {
		t.Fatalf("pwd without workdir = %q, want the attempt dir %q", out, s.Dir)
	}
}

func TestStopKillsProcessGroup(t *testing.T) {
	t.Parallel()
	s := testSpec(t, "sh", "-c", `sleep 1000 & echo $! >pids; sleep 1000 & echo $! >>pids; echo ready; wait`)
	p := start(t, s)
	waitForLog(t, s, "ready")
	pgid := readPgid(t, s)
	if err := syscall.Kill(-pgid, 0); err != nil {
		t.Fatalf("group %d not alive while running: %v", pgid, err)
	}
	if !p.Stop("", "cancelled by alice") {
		t.Fatal("Stop of a running attempt = false, want true")
	}
	if p.Stop(berth.CauseOperator, "second stop is ignored") {
		t.Fatal("second Stop = true, want false")
	}
	ex := await(t, p)
	checkExit(t, ex, berth.AttemptCancelled, nil, "cancelled by alice")
	assertDead(t, pidsIn(t, filepath.Join(s.Dir, "pids"))...)
	awaitGroupGone(t, pgid)
}

func TestLeaderExitKillsRestOfGroup(t *testing.T) {
	t.Parallel()
	s := testSpec(t, "sh", "-c", `sleep 1000 & echo $! >pids`)
	ex, _ := run(t, s)
	checkExit(t, ex, berth.AttemptSucceeded, intp(0), "")
	assertDead(t, pidsIn(t, filepath.Join(s.Dir, "pids"))...)
	if pgid, ok := s.Groups.Group(s.AttemptID); ok {
		t.Fatalf("journal still holds group %d of an ended attempt", pgid)
	}
}

func TestStopEscalatesToSIGKILL(t *testing.T) {
	t.Parallel()
	// The ignored SIGTERM is inherited by sleep, so only SIGKILL ends either.
	s := testSpec(t, "sh", "-c", `trap "" TERM; sleep 1000 & echo $! >pids; echo ready; wait`)
	s.Grace = 200 * time.Millisecond
	p := start(t, s)
	waitForLog(t, s, "ready")
	began := time.Now()
	p.Stop("", "preempted")
	ex := await(t, p)
	if waited := time.Since(began); waited < s.Grace {
		t.Errorf("ended %v after Stop, before the %v grace period", waited, s.Grace)
	}
	checkExit(t, ex, berth.AttemptCancelled, nil, "preempted")
	assertDead(t, pidsIn(t, filepath.Join(s.Dir, "pids"))...)
}

func TestMaxRuntime(t *testing.T) {
	t.Parallel()
	s := testSpec(t, "sleep", "1000")
	s.MaxRuntime = 100 * time.Millisecond
	ex, _ := run(t, s)
	checkExit(t, ex, berth.AttemptFailed, intp(75), "max_runtime exceeded (100ms)")
	checkCause(t, ex, berth.CauseBudget)
}

func TestMaxRuntimeNotReached(t *testing.T) {
	t.Parallel()
	s := testSpec(t, "true")
	s.MaxRuntime = time.Hour
	ex, _ := run(t, s)
	checkExit(t, ex, berth.AttemptSucceeded, intp(0), "")
}

func TestKill(t *testing.T) {
	t.Parallel()
	s := testSpec(t, "sh", "-c", `trap "" TERM; echo ready; sleep 1000`)
	p := start(t, s)
	waitForLog(t, s, "ready")
	p.Kill("", "")
	checkExit(t, await(t, p), berth.AttemptCancelled, nil, "killed")
	if p.Stop("", "after the end") {
		t.Fatal("Stop after the end = true, want false")
	}
	p.Kill(berth.CauseReassigned, "after the end")
	checkExit(t, p.Exit(), berth.AttemptCancelled, nil, "killed")
}

func TestKillDuringStopKeepsStopReason(t *testing.T) {
	t.Parallel()
	s := testSpec(t, "sh", "-c", `trap "" TERM; echo ready; sleep 1000`)
	s.Grace = time.Hour
	p := start(t, s)
	waitForLog(t, s, "ready")
	p.Stop("", "drain")
	p.Kill(berth.CauseReassigned, reassigned)
	checkExit(t, await(t, p), berth.AttemptCancelled, nil, "drain")
}

func TestStartFailure(t *testing.T) {
	t.Parallel()
	script := filepath.Join(t.TempDir(), "step.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntrue\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Spec)
		reason string
		code   *int
		logged bool // the reason is in the attempt's output
	}{
		{"not found", func(s *Spec) { s.Command = []string{"nope"} },
			`start: exec: "nope": executable file not found in $PATH`, intp(127), true},
		{"no such path", func(s *Spec) { s.Command = []string{"/nonexistent/bin/tool"} },
			"start: fork/exec /nonexistent/bin/tool: no such file or directory", intp(127), true},
		{"not executable", func(s *Spec) { s.Command = []string{script} },
			"start: fork/exec " + script + ": permission denied", intp(126), true},
		{"workdir missing", func(s *Spec) { s.Workdir = "/nonexistent/workdir" },
			"start: workdir: stat /nonexistent/workdir: no such file or directory", nil, true},
		{"empty command", func(s *Spec) { s.Command = nil }, "start: empty command", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := testSpec(t, "true")
			tc.mutate(&s)
			p := start(t, s)
			select {
			case <-p.Done():
			default:
				t.Fatal("a process that failed to start is not already Done")
			}
			checkExit(t, p.Exit(), berth.AttemptFailed, tc.code, tc.reason)
			if pgid, ok := s.Groups.Group(s.AttemptID); ok {
				t.Fatalf("group %d recorded for a process that never started", pgid)
			}
			out, _ := os.ReadFile(s.LogPath)
			if want := "berth: cannot " + tc.reason + "\n"; tc.logged && string(out) != want {
				t.Fatalf("output = %q, want %q", out, want)
			}
		})
	}
}

func TestStartCancelledContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p, err := ProcessExecutor{}.Start(ctx, testSpec(t, "true"))
	if err != nil {
		t.Fatal(err)
	}
	checkExit(t, await(t, p), berth.AttemptCancelled, nil, "not started: context canceled")
}

func TestStartErrorsWhenDirCannotBeCreated(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := testSpec(t, "true")
	s.Dir = filepath.Join(file, "attempt")
	s.LogPath = filepath.Join(s.Dir, "output.log")
	if p, err := (ProcessExecutor{}).Start(context.Background(), s); err == nil {
		t.Fatalf("Start under a regular file = %v, nil; want an error", p)
	}
	s = testSpec(t, "true")
	s.LogPath = filepath.Join(file, "output.log")
	if p, err := (ProcessExecutor{}).Start(context.Background(), s); err == nil {
		t.Fatalf("Start with an unwritable log = %v, nil; want an error", p)
	}
}

func TestKillStale(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	groups := openJournal(t, root)
	// A group still running (as if a previous agent had left it), one that
	// has ended, and a line of garbage.
	live := specIn(t, root, groups, "live", "sh", "-c", `sleep 1000 & echo ready; wait`)
	p := start(t, live)
	waitForLog(t, live, "ready")
	pgid := readPgid(t, live)
	await(t, start(t, specIn(t, root, groups, "ended", "true")))
	f, err := os.OpenFile(filepath.Join(root, "groups"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("start garbage not-a-pid\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()

	n, err := KillStale(filepath.Join(root, "groups"))
	if n != 1 {
		t.Fatalf("KillStale killed %d groups, want 1", n)
	}
	if err == nil || !strings.Contains(err.Error(), "not a process group id") {
		t.Fatalf("KillStale error = %v, want one about the garbage line", err)
	}
	checkExit(t, await(t, p), berth.AttemptFailed, nil, "killed by signal SIGKILL")
	awaitGroupGone(t, pgid)

	if n, err := KillStale(filepath.Join(root, "missing")); n != 0 || err != nil {
		t.Fatalf("KillStale(missing journal) = %d, %v; want 0, nil", n, err)
	}
}

func TestNoopExecutor(t *testing.T) {
	t.Parallel()
	s := testSpec(t, "nope")
	p, err := NoopExecutor{}.Start(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("noop process not Done at once")
	}
	p.Stop("", "x")
	p.Kill("", "")
	p.Progressed()
	checkExit(t, p.Exit(), berth.AttemptSucceeded, intp(0), "")
	if _, err := os.Stat(s.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("noop executor created %s: %v", s.Dir, err)
	}
}

func TestEnvironLaterEntriesWin(t *testing.T) {
	t.Parallel()
	env := environ(Spec{JobID: "j", AttemptID: "a", TaskIndex: 1, GPUs: []int{3}, Env: map[string]string{"A": "b"}})
	n := len(env)
	if env[n-1] != "CUDA_VISIBLE_DEVICES=3" || env[n-2] != "BERTH_ATTEMPT_ID=a" {
		t.Fatalf("environ ends with %q; Berth's variables must come last", env[n-4:])
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "BERTH_ARRAY_INDEX=") {
			t.Fatalf("environ has %q without an array index", kv)
		}
	}
}

// BenchmarkStartTrue starts `true` and waits for it to end, one at a time.
func BenchmarkStartTrue(b *testing.B) { benchStartTrue(b, nil) }

// BenchmarkStartTrueInCgroup is BenchmarkStartTrue with each attempt in a
// cgroup of its own, with limits: made, entered, emptied and removed.
func BenchmarkStartTrueInCgroup(b *testing.B) {
	cg := cgroupsOrSkip(b)
	benchStartTrue(b, func(id string) *Sandbox { return &Sandbox{cgroups: cg, attempt: id, cpus: 1, memory: 1 << 30} })
}

// benchStartTrue starts `true` and waits for it to end, one at a time, in
// the sandbox of each attempt (nil: none).
func benchStartTrue(b *testing.B, sandbox func(id string) *Sandbox) {
	root := b.TempDir()
	for i := 0; b.Loop(); i++ {
		id := strconv.Itoa(i)
		dir := filepath.Join(root, id)
		var sb *Sandbox
		if sandbox != nil {
			sb = sandbox(id)
		}
		p, err := ProcessExecutor{}.Start(context.Background(), Spec{AttemptID: id, JobID: "j",
			Command: []string{"true"}, Workdir: root, Dir: dir, LogPath: dir + ".log", Sandbox: sb})
		if err != nil {
			b.Fatal(err)
		}
		<-p.Done()
		if ex := p.Exit(); ex.State != berth.AttemptSucceeded {
			b.Fatalf("exit %+v", ex)
		}
	}
}

// BenchmarkStartTrueParallel runs many `true` attempts at once, as an agent
// with several slots does: with the job writing its log itself (file, as
// a service does) and with its stdout and stderr piped through the agent
// (streams, as a batch job's are).
func BenchmarkStartTrueParallel(b *testing.B) {
	for _, streams := range []bool{false, true} {
		b.Run(map[bool]string{false: "file", true: "streams"}[streams], func(b *testing.B) {
			root := b.TempDir()
			b.SetParallelism(4)
			var seq atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					dir := filepath.Join(root, strconv.FormatInt(seq.Add(1), 10))
					spec := Spec{AttemptID: "a", JobID: "j", Command: []string{"true"}, Workdir: root, Dir: dir, LogPath: dir + ".log"}
					if streams {
						spec.Streams = new(Streams)
					}
					p, err := ProcessExecutor{}.Start(context.Background(), spec)
					if err != nil {
						b.Error(err)
						return
					}
					<-p.Done()
					if ex := p.Exit(); ex.State != berth.AttemptSucceeded {
						b.Errorf("exit %+v", ex)
						return
					}
				}
			})
		})
	}
}

func TestAwaitExitWaitsOnPidfdWithoutReaping(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sh", "-c", "exit 7")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(cmd.Process.Pid), 0, 0)
	if errno != 0 {
		t.Fatalf("pidfd_open: %v", errno)
	}
	if !pollExit(int(fd), cmd.Process.Pid) {
		t.Fatal("pollExit could not wait through the poller")
	}
	if !hasExited(cmd.Process.Pid) {
		t.Fatal("hasExited = false after the exit")
	}
	// Still unreaped: Wait gets the real status.
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("Wait after awaitExit = %v, want exit status 7", err)
	}
}

func TestStopCauses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cause string
		kill  bool
		state berth.AttemptState
		code  *int
	}{
		{"", false, berth.AttemptCancelled, nil},
		{berth.CauseOperator, false, berth.AttemptCancelled, intp(79)},
		{berth.CauseGPUHealth, false, berth.AttemptFailed, intp(78)},
		{berth.CauseReassigned, true, berth.AttemptFailed, intp(77)},
	} {
		t.Run(tc.cause, func(t *testing.T) {
			t.Parallel()
			s := testSpec(t, "sleep", "1000")
			p := start(t, s)
			if tc.kill {
				p.Kill(tc.cause, "why")
			} else {
				p.Stop(tc.cause, "why")
			}
			ex := await(t, p)
			checkExit(t, ex, tc.state, tc.code, "why")
			checkCause(t, ex, tc.cause)
		})
	}
}

func TestStall(t *testing.T) {
	t.Parallel()
	s := testSpec(t, "sh", "-c", "echo started; sleep 1000")
	s.StallTimeout, s.Grace = 300*time.Millisecond, 100*time.Millisecond
	began := time.Now()
	ex, _ := run(t, s)
	if took := time.Since(began); took < s.StallTimeout {
		t.Errorf("stalled after %v, before the %v stall timeout", took, s.StallTimeout)
	}
	checkExit(t, ex, berth.AttemptFailed, intp(76), "stalled: no output and no progress for 300ms")
	checkCause(t, ex, berth.CauseStall)
}

func TestNoStallWhileWriting(t *testing.T) {
	t.Parallel()
	// Each runs about 1s, writing every 100ms, with a 400ms stall timeout.
	for name, line := range map[string]string{"output": "step $i", "progress lines": "BERTH_PROGRESS 0.$i"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := testSpec(t, "sh", "-c", `for i in 1 2 3 4 5 6 7 8 9; do echo "`+line+`"; sleep 0.1; done`)
			s.StallTimeout = 400 * time.Millisecond
			ex, _ := run(t, s)
			checkExit(t, ex, berth.AttemptSucceeded, intp(0), "")
		})
	}
}

func TestNoStallWhileProgressing(t *testing.T) {
	t.Parallel()
	s := testSpec(t, "sleep", "1")
	s.StallTimeout = 400 * time.Millisecond
	p := start(t, s)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-p.Done():
			checkExit(t, p.Exit(), berth.AttemptSucceeded, intp(0), "")
			return
		case <-tick.C:
			p.Progressed()
		}
	}
}

func TestWatchdogDuringStopKeepsStopCause(t *testing.T) {
	t.Parallel()
	// max_runtime passes while the stop's grace period runs.
	s := testSpec(t, "sh", "-c", `trap "" TERM; echo ready; sleep 1000`)
	s.MaxRuntime, s.Grace = 500*time.Millisecond, time.Second
	p := start(t, s)
	waitForLog(t, s, "ready")
	if !p.Stop(berth.CauseOperator, "first") {
		t.Fatal("Stop = false before max_runtime")
	}
	ex := await(t, p)
	checkExit(t, ex, berth.AttemptCancelled, intp(79), "first")
	checkCause(t, ex, berth.CauseOperator)
}
