package e2e

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
)

// TestRunPassesExitCodeAndStreams checks berth run end to end: the job's
// stdout reaches berth run's stdout and its stderr its stderr, each alone,
// and berth run exits with the job's exit code (3 when it exits 3, 0 when
// it succeeds).
func TestRunPassesExitCodeAndStreams(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	cl.addAgent("vm-1")

	out, errOut, err := runCLI(t, "", "", "run", "--server", cl.url, "--",
		"sh", "-c", "echo out 1; echo err 1 >&2; echo out 2; echo err 2 >&2; exit 3")
	if code := exitCode(err); code != 3 {
		t.Fatalf("berth run of a job that exits 3: exit %d, want 3\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if out != "out 1\nout 2\n" {
		t.Errorf("stdout = %q, want the job's stdout alone, %q", out, "out 1\nout 2\n")
	}
	if !strings.Contains(errOut, "err 1\nerr 2\n") || strings.Contains(errOut, "out ") {
		t.Errorf("stderr = %q, want the job's stderr lines and none of its stdout", errOut)
	}
	if !strings.Contains(errOut, "exit code 3") {
		t.Errorf("stderr = %q, want a line saying the job failed with exit code 3", errOut)
	}

	// A command that cannot start: a shell's 127, and Berth's line on
	// stderr.
	out, errOut, err = runCLI(t, "", "", "run", "--server", cl.url, "--", "no-such-command-berth")
	if code := exitCode(err); code != 127 || out != "" || !strings.Contains(errOut, "berth: cannot start") {
		t.Errorf("berth run of a missing command: exit %d, stdout %q, stderr %q; want 127, nothing, why on stderr", code, out, errOut)
	}

	out, errOut, err = runCLI(t, "", "", "run", "--server", cl.url, "--name", "fine", "--", "sh", "-c", "echo done")
	if code := exitCode(err); code != 0 || out != "done\n" || errOut != "" {
		t.Errorf("berth run of a job that succeeds: exit %d, stdout %q, stderr %q; want 0, %q, nothing", code, out, errOut, "done\n")
	}
}

// TestRunDetachPrintsTheID checks that berth run --detach prints the job's
// id, as berth submit does, and leaves the job running.
func TestRunDetachPrintsTheID(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	cl.addAgent("vm-1")
	out, errOut, err := runCLI(t, "", "", "run", "--server", cl.url, "--detach", "--", "sh", "-c", "echo started; sleep 60")
	if code := exitCode(err); code != 0 {
		t.Fatalf("berth run --detach: exit %d, stderr %s", code, errOut)
	}
	id := strings.TrimSpace(out)
	d := cl.awaitState(id, 30*time.Second, berth.JobRunning)
	if d.Command[0] != "sh" {
		t.Errorf("job %s runs %v, want the command given", id, d.Command)
	}
	if _, err := cl.c.Cancel(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	cl.awaitState(id, 30*time.Second, berth.JobCancelled)
}

// attached is a berth run process whose stdout and stderr are kept apart,
// line by line.
type attached struct {
	cmd            *exec.Cmd
	stdout, stderr *lineBuffer
	done           chan struct{}
	err            error // cmd.Wait's, once done is closed
}

// startRun starts berth run with args.
func startRun(t *testing.T, args ...string) *attached {
	t.Helper()
	cmd := exec.Command(berthBin, append([]string{"run"}, args...)...)
	cmd.Env = append(os.Environ(), "BERTH_TOKEN=", "BERTH_SERVER=", "BERTH_CREDENTIALS="+filepath.Join(t.TempDir(), "credentials.json"))
	a := &attached{cmd: cmd, stdout: newLineBuffer(), stderr: newLineBuffer(), done: make(chan struct{})}
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	cmd.Stdout, cmd.Stderr = outW, errW
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var read sync.WaitGroup
	for _, s := range []struct {
		r   io.Reader
		buf *lineBuffer
	}{{outR, a.stdout}, {errR, a.stderr}} {
		read.Go(func() {
			sc := bufio.NewScanner(s.r)
			for sc.Scan() {
				s.buf.add(sc.Text())
			}
		})
	}
	go func() {
		a.err = cmd.Wait()
		outW.Close()
		errW.Close()
		read.Wait() // every line is in the buffers once done is closed
		close(a.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-a.done
		if t.Failed() {
			t.Logf("--- berth run stdout ---\n%s\n--- stderr ---\n%s", a.stdout, a.stderr)
		}
	})
	return a
}

// await waits for berth run to exit and returns its exit status.
func (a *attached) await(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-a.done:
	case <-time.After(timeout):
		t.Fatalf("berth run still runs after %s", timeout)
	}
	return exitCode(a.err)
}

// jobOf returns the id of the one job named name.
func (cl *cluster) jobOf(name string) string {
	cl.t.Helper()
	list, err := cl.c.Jobs(cl.t.Context(), client.ListOptions{})
	if err != nil {
		cl.t.Fatal(err)
	}
	for _, j := range list.Jobs {
		if j.Name == name {
			return j.ID
		}
	}
	cl.t.Fatalf("no job named %s", name)
	return ""
}

// interruptedRun starts berth run of a job named name that runs trap, says
// "started" and loops; once berth run has printed that line it sends
// berth run SIGINT, as Ctrl-C does.
func interruptedRun(t *testing.T, cl *cluster, name, trap string) *attached {
	t.Helper()
	a := startRun(t, "--server", cl.url, "--name", name, "--",
		"sh", "-c", trap+"; echo started; while :; do sleep 0.05; done")
	if _, ok := a.stdout.await("started", 30*time.Second); !ok {
		t.Fatal("the job's output did not reach berth run")
	}
	_ = a.cmd.Process.Signal(syscall.SIGINT)
	return a
}

// TestRunCtrlCCancelsTheJob checks that Ctrl-C (SIGINT) to a real berth
// run cancels its job on the server, and that berth run keeps printing
// until the job has ended, then exits 130; and that a second Ctrl-C stops
// waiting at once while the job is still being cancelled.
func TestRunCtrlCCancelsTheJob(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	cl.addAgent("vm-1")

	t.Run("once", func(t *testing.T) {
		a := interruptedRun(t, cl, "ctrlc", "trap 'echo terminated; exit 143' TERM")
		if code := a.await(t, 30*time.Second); code != 130 {
			t.Errorf("berth run interrupted: exit %d, want 130", code)
		}
		if _, ok := a.stdout.await("terminated", 0); !ok {
			t.Error("berth run did not print the job's output up to its end after Ctrl-C")
		}
		if _, ok := a.stderr.await("cancelling job", 0); !ok {
			t.Error("berth run did not say on stderr that it cancels the job")
		}
		if d := cl.job(cl.jobOf("ctrlc")); d.State != berth.JobCancelled {
			t.Errorf("job after Ctrl-C is %s, want cancelled", d.State)
		}
	})
	t.Run("twice", func(t *testing.T) {
		// The job ignores SIGTERM, so it lives through the agent's 10 s
		// grace: the second Ctrl-C must not wait for it.
		a := interruptedRun(t, cl, "stubborn", "trap 'echo ignoring' TERM")
		if _, ok := a.stdout.await("ignoring", 30*time.Second); !ok {
			t.Fatal("the job was not sent SIGTERM after the first Ctrl-C")
		}
		_ = a.cmd.Process.Signal(syscall.SIGINT)
		if code := a.await(t, 5*time.Second); code != 130 {
			t.Errorf("berth run interrupted twice: exit %d, want 130", code)
		}
		id := cl.jobOf("stubborn")
		if d := cl.job(id); d.State.Terminal() {
			t.Errorf("job is %s as berth run leaves, want it still being cancelled", d.State)
		}
		cl.awaitState(id, 30*time.Second, berth.JobCancelled)
	})
}

// TestRunPrefixesAGangsLinesWithTheirRank checks that berth run of a
// two-node gang prints each member's lines after its rank, stdout and
// stderr still apart.
func TestRunPrefixesAGangsLinesWithTheirRank(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	cl.addAgent("vm-1")
	cl.addAgent("vm-2")
	out, errOut, err := runCLI(t, "", "", "run", "--server", cl.url, "--nodes", "2", "--",
		"sh", "-c", `printf 'hello from %s\nbye\n' "$BERTH_TASK_INDEX"; printf 'warn %s' "$BERTH_TASK_INDEX" >&2`)
	if code := exitCode(err); code != 0 {
		t.Fatalf("berth run of a gang: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	slices.Sort(lines)
	want := []string{"[0] bye", "[0] hello from 0", "[1] bye", "[1] hello from 1"}
	if !slices.Equal(lines, want) {
		t.Errorf("stdout lines (sorted) = %q, want %q", lines, want)
	}
	// A last line without a newline is ended, after its prefix, too.
	for _, w := range []string{"[0] warn 0\n", "[1] warn 1\n"} {
		if !strings.Contains(errOut, w) {
			t.Errorf("stderr = %q, want %q", errOut, w)
		}
	}
	if strings.Contains(errOut, "hello") {
		t.Errorf("stderr = %q holds stdout's lines", errOut)
	}
	// Rank 0's lines come in its order.
	if i, j := strings.Index(out, "[0] hello"), strings.Index(out, "[0] bye"); i > j {
		t.Errorf("rank 0's lines out of order: %q", out)
	}
}
