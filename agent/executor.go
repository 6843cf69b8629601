package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/berth-dev/berth"
)

// DefaultGrace is how long a stopped attempt gets between SIGTERM and
// SIGKILL when its Spec says 0.
const DefaultGrace = 10 * time.Second

// Spec is one attempt to run.
type Spec struct {
	AttemptID, JobID string
	TaskIndex        int
	ArrayIndex       *int              // BERTH_ARRAY_INDEX when not nil
	Command          []string          // argv, run directly (no shell)
	JobName, User    string            // BERTH_JOB_NAME, BERTH_USER when not empty
	Attempt          int               // BERTH_ATTEMPT when not 0
	Host             string            // BERTH_HOST, the agent's host label, when not empty
	Env              map[string]string // job env, added to the agent's own environment
	Server           string            // the server's URL(s), as the agent has them: the job's BERTH_SERVER
	Workdir          string            // cwd; empty: Dir
	Dir              string            // the attempt's scratch directory, created by Start only when Workdir is empty
	LogPath          string            // combined stdout+stderr file, created or appended to by Start; its directory must exist
	Groups           *GroupJournal     // where the process group is recorded while it lives; nil: nowhere
	GPUs             []int             // CUDA_VISIBLE_DEVICES; empty: "" so the job sees no GPU
	// GPUDevices, when not nil, are the CUDA_VISIBLE_DEVICES entries of
	// GPUs, one each: an index, or a MIG device's UUID.
	GPUDevices []string
	// GPUShare, for an attempt holding a fraction of its one GPU, is its
	// share in milli-GPUs (BERTH_GPU_FRACTION) and, with MPS, its client
	// limits; nil: GPUs whole.
	GPUShare     *GPUShare
	MaxRuntime   time.Duration // 0: none; past it the attempt is stopped with cause budget
	StallTimeout time.Duration // 0: none; with no output and no progress for this long the attempt is stopped with cause stall
	Grace        time.Duration // SIGTERM → wait Grace → SIGKILL; 0: DefaultGrace
	ProgressURL  string        // BERTH_PROGRESS_URL when not empty
	Sandbox      *Sandbox      // the account and cgroup it runs in; nil: the agent's
	// Detached leaves the process running when the agent dies (no
	// Pdeathsig), for a restarted agent to adopt: services.
	Detached bool
	// Streams, when not nil, has the job's stdout and stderr piped to the
	// agent, which appends them to LogPath and notes which is which; nil:
	// the job appends both to LogPath itself (a Detached job, which must
	// outlive the agent).
	Streams *Streams
}

// Exit is how an attempt ended. State is succeeded (exit code 0), failed
// (non-zero exit, killed by a signal, start failure, stopped by a
// watchdog) or cancelled (stopped without a cause, or with cause
// operator). Cause is set when the attempt was stopped for one
// (berth.Cause*: Stop or Kill with a cause, max_runtime, stall_timeout),
// or is oom when, not stopped, it failed after the kernel killed a process
// of its cgroup for memory; ExitCode is then the cause's code
// (berth.CauseExitCode). A command that
// could not be run has a shell's codes: 127 not found, 126 not
// executable. Otherwise ExitCode is nil when the process did not exit by
// itself (killed by a signal, never started for another reason).
type Exit struct {
	State    berth.AttemptState
	ExitCode *int
	Reason   string
	Cause    string
	// Lingering lists the processes of the attempt's group still alive
	// when it ended: SIGKILL had not ended them within the grace period
	// (a process stuck in the kernel). Normally nil.
	Lingering []int
}

// Executor starts attempts.
type Executor interface {
	// Start starts s and returns its Process. A job that cannot be started
	// (binary not found, workdir missing) is not an error: it is a Process
	// already Done with State failed, whose log says why. Start errors only
	// when the attempt's own directory or log file cannot be created.
	Start(ctx context.Context, s Spec) (Process, error)
}

// Process is one started attempt.
type Process interface {
	// Done is closed when the whole attempt has ended.
	Done() <-chan struct{}
	// Exit is how the attempt ended; valid once Done is closed.
	Exit() Exit
	// Stop sends SIGTERM to the attempt's process group and SIGKILL after
	// the grace period. The attempt ends with cause (empty: a plain cancel)
	// and reason ("stopped" if empty), in the state and with the exit code
	// Exit describes. It reports whether this call began the stop: it does
	// nothing once the attempt has ended or is being stopped, so the first
	// cause of ending wins (a Stop after max_runtime keeps cause budget).
	Stop(cause, reason string) bool
	// Kill sends SIGKILL to the attempt's process group now. The attempt
	// ends with cause and reason ("killed" if empty) unless it was already
	// being stopped, whose cause and reason it keeps.
	Kill(cause, reason string)
	// Progressed tells the stall watchdog that the attempt reported
	// progress just now.
	Progressed()
}

// ProcessExecutor runs each attempt as a child process group of the agent:
// the leader is Command, in its own process group, killed if the agent dies
// (Pdeathsig), with stdout and stderr appended to LogPath, as the account
// and in the cgroup of its Spec.Sandbox. When the leader exits, the rest of
// its group is killed, then every process left in its cgroup, and Done
// waits (at most Grace for each) for them to die. It records the group in Spec.Groups while it lives
// so that the agent's watchdog (Watchdog), or a restarted agent
// (KillStale), can kill what a dead agent left behind.
type ProcessExecutor struct{}

var _ Executor = ProcessExecutor{}

// devNull is shared as every job's stdin, saving an open per start.
var devNull = sync.OnceValue(func() *os.File {
	f, err := os.Open(os.DevNull)
	if err != nil {
		return nil
	}
	return f
})

// Start runs s as described on Executor. It returns an error only if Dir
// (when it is the working directory), the log file or the journal entry
// cannot be written (in the last case the started group is killed first).
func (ProcessExecutor) Start(ctx context.Context, s Spec) (Process, error) {
	if s.Workdir == "" {
		if err := os.MkdirAll(s.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("attempt dir: %w", err)
		}
		if err := s.Sandbox.own(s.Dir); err != nil {
			return nil, fmt.Errorf("attempt dir: %w", err)
		}
	}
	logf, err := os.OpenFile(s.LogPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	if err := s.Sandbox.own(s.LogPath); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("open log: %w", err)
	}
	if err := ctx.Err(); err != nil {
		_ = logf.Close()
		return doneWith(Exit{State: berth.AttemptCancelled, Reason: "not started: " + err.Error()}), nil
	}
	if len(s.Command) == 0 || s.Command[0] == "" {
		_ = logf.Close()
		return failedProcess("start: empty command"), nil
	}
	cmd, err := command(s)
	if err != nil {
		return notStarted(logf, s.Streams, err, execFailureCode(err)), nil
	}
	cmd.Dir = s.Workdir
	if cmd.Dir == "" {
		cmd.Dir = s.Dir
	}
	cmd.Env = environ(s)
	cmd.Stdout, cmd.Stderr = logf, logf
	var pipes []*os.File // the read ends, then the write ends, of stdout and stderr
	var logSize int64
	if s.Streams != nil {
		info, err := logf.Stat()
		if err == nil {
			logSize = info.Size()
			pipes, err = streamPipes()
		}
		if err != nil {
			_ = logf.Close()
			return nil, fmt.Errorf("log: %w", err)
		}
		cmd.Stdout, cmd.Stderr = pipes[2], pipes[3]
	}
	if f := devNull(); f != nil {
		cmd.Stdin = f
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if s.Detached {
		cmd.SysProcAttr.Pdeathsig = 0
	}
	if err = s.Sandbox.Start(cmd); err != nil {
		closeAll(pipes)
		s.Sandbox.end(0)
		code := execFailureCode(err)
		if _, serr := os.Stat(cmd.Dir); serr != nil { // the kernel blames the binary for a bad cwd
			err, code = fmt.Errorf("workdir: %w", serr), nil
		}
		return notStarted(logf, s.Streams, err, code), nil
	}
	if s.Streams != nil {
		closeAll(pipes[2:]) // the child has its own copies
		s.Streams.start(logf, logSize, pipes[0], pipes[1])
	} else {
		_ = logf.Close() // the child has its own copy
	}
	grace := s.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	p := &process{cmd: cmd, pgid: cmd.Process.Pid, grace: grace, done: make(chan struct{}),
		attemptID: s.AttemptID, groups: s.Groups, logPath: s.LogPath, streams: s.Streams, sandbox: s.Sandbox}
	if s.Groups != nil {
		if err := s.Groups.Started(s.AttemptID, p.pgid); err != nil {
			_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
			_ = cmd.Wait()
			s.Sandbox.end(grace)
			return nil, err
		}
	}
	p.mu.Lock()
	if s.MaxRuntime > 0 {
		reason := fmt.Sprintf("max_runtime exceeded (%v)", s.MaxRuntime)
		p.maxTimer = time.AfterFunc(s.MaxRuntime, func() { p.Stop(berth.CauseBudget, reason) })
	}
	if s.StallTimeout > 0 {
		p.stall, p.active = s.StallTimeout, time.Now()
		if info, err := os.Stat(s.LogPath); err == nil {
			p.logSize = info.Size() // the log is appended to: what is there is not this attempt's output
		}
		p.stallTimer = time.AfterFunc(stallCheck(s.StallTimeout), p.checkStall)
	}
	p.mu.Unlock()
	go p.wait()
	return p, nil
}

// command builds the exec.Cmd for s. A PATH in the job's env is where a
// bare command name is looked up; otherwise the agent's PATH is.
func command(s Spec) (*exec.Cmd, error) {
	name := s.Command[0]
	path, ok := s.Env["PATH"]
	if !ok || strings.Contains(name, "/") {
		return exec.Command(name, s.Command[1:]...), nil
	}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return &exec.Cmd{Path: p, Args: s.Command}, nil
		}
	}
	return nil, &exec.Error{Name: name, Err: exec.ErrNotFound}
}

// environ is the agent's environment but for its BERTH_ variables, then
// the job's, then Berth's own variables (later entries win; os/exec drops
// the earlier duplicates). The agent's BERTH_ variables configure it, and
// some are credentials ($BERTH_JOIN_TOKEN, $BERTH_TOKEN, a $BERTH_STORE
// URL's password): a job's output is for whoever may read its logs.
func environ(s Spec) []string {
	own := os.Environ()
	env := make([]string, 0, len(own)+len(s.Env)+7)
	for _, kv := range own {
		if !strings.HasPrefix(kv, "BERTH_") {
			env = append(env, kv)
		}
	}
	env = append(env, s.Sandbox.env()...) // before the job's env, which may set its own HOME
	if s.Server != "" {                   // before the job's env, which may name another
		env = append(env, "BERTH_SERVER="+s.Server)
	}
	for k, v := range s.Env {
		env = append(env, k+"="+v)
	}
	env = append(env, "BERTH_JOB_ID="+s.JobID, "BERTH_TASK_INDEX="+strconv.Itoa(s.TaskIndex), "BERTH_ATTEMPT_ID="+s.AttemptID)
	for _, kv := range [...][2]string{{"BERTH_JOB_NAME", s.JobName}, {"BERTH_USER", s.User}, {"BERTH_HOST", s.Host}} {
		if kv[1] != "" {
			env = append(env, kv[0]+"="+kv[1])
		}
	}
	if s.Attempt > 0 {
		env = append(env, "BERTH_ATTEMPT="+strconv.Itoa(s.Attempt))
	}
	if s.ArrayIndex != nil {
		env = append(env, "BERTH_ARRAY_INDEX="+strconv.Itoa(*s.ArrayIndex))
	}
	if s.ProgressURL != "" {
		env = append(env, "BERTH_PROGRESS_URL="+s.ProgressURL)
	}
	b := []byte("CUDA_VISIBLE_DEVICES=")
	for i, g := range s.GPUs {
		if i > 0 {
			b = append(b, ',')
		}
		if i < len(s.GPUDevices) {
			b = append(b, s.GPUDevices[i]...)
		} else {
			b = strconv.AppendInt(b, int64(g), 10)
		}
	}
	return append(append(env, string(b)), s.GPUShare.env()...)
}

// process is a running attempt of ProcessExecutor.
type process struct {
	cmd   *exec.Cmd
	pgid  int
	grace time.Duration
	done  chan struct{}

	attemptID string
	groups    *GroupJournal // nil: not recorded
	logPath   string
	streams   *Streams // nil: the job writes its log itself
	sandbox   *Sandbox // nil: none

	mu         sync.Mutex
	exited     bool // the leader has exited: signal the group no more (its id may be reused)
	stopping   bool
	stopCause  string
	stopReason string
	maxTimer   *time.Timer // max_runtime; nil: none
	graceTimer *time.Timer
	exit       Exit

	// The stall watchdog (stall > 0): active is when the attempt last
	// wrote output (as far as a check could tell: when the check saw the
	// log had grown past logSize) or reported progress.
	stall      time.Duration
	stallTimer *time.Timer
	active     time.Time
	logSize    int64
}

func (p *process) Done() <-chan struct{} { return p.done }

func (p *process) Exit() Exit {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit
}

func (p *process) Stop(cause, reason string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.terminateLocked(cause, reason)
}

// terminateLocked starts a graceful stop for cause and reports whether it
// did (it does nothing once the attempt has ended or is being stopped).
func (p *process) terminateLocked(cause, reason string) bool {
	if p.exited || p.stopping {
		return false
	}
	if reason == "" {
		reason = "stopped"
	}
	p.stopping, p.stopCause, p.stopReason = true, cause, reason
	_ = syscall.Kill(-p.pgid, syscall.SIGTERM)
	p.graceTimer = time.AfterFunc(p.grace, p.killGroup)
	return true
}

func (p *process) Progressed() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.active = time.Now()
}

// stallCheck is how often the stall watchdog looks at an attempt's log:
// a quarter of the timeout, so that a stall is noticed at most that late.
func stallCheck(timeout time.Duration) time.Duration { return max(timeout/4, time.Millisecond) }

// checkStall is the stall watchdog's timer function: it stops the attempt
// once it has written no output and reported no progress for the stall
// timeout, and otherwise looks again later.
func (p *process) checkStall() {
	info, err := os.Stat(p.logPath)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited || p.stopping {
		return
	}
	now := time.Now()
	if err == nil && info.Size() != p.logSize {
		p.logSize, p.active = info.Size(), now
	}
	left := p.stall - now.Sub(p.active)
	if left <= 0 {
		p.terminateLocked(berth.CauseStall, fmt.Sprintf("stalled: no output and no progress for %v", p.stall))
		return
	}
	p.stallTimer.Reset(min(left, stallCheck(p.stall)))
}

func (p *process) killGroup() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.exited {
		_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
	}
}

func (p *process) Kill(cause, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return
	}
	if reason == "" {
		reason = "killed"
	}
	if !p.stopping {
		p.stopping, p.stopCause, p.stopReason = true, cause, reason
	}
	if p.graceTimer != nil {
		p.graceTimer.Stop()
	}
	_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
}

// wait is the one goroutine of a process. It waits for the leader to exit
// without reaping it, so that the group id cannot be reused while the rest
// of the group is killed; then it reaps the leader, waits for the other
// members to die, and closes done.
func (p *process) wait() {
	pid := p.cmd.Process.Pid
	awaitExit(pid)
	p.mu.Lock()
	p.exited = true
	for _, t := range []*time.Timer{p.maxTimer, p.stallTimer, p.graceTimer} {
		if t != nil {
			t.Stop()
		}
	}
	_ = syscall.Kill(-p.pgid, syscall.SIGKILL) // the leader is a zombie: the id is still ours
	p.mu.Unlock()
	err := p.cmd.Wait()
	lingering := awaitGroup(p.pgid, p.grace)
	end := p.sandbox.end(p.grace) // what left the group but stayed in the cgroup, which may hold the pipes
	if p.streams != nil {
		p.streams.drain() // the output is whole in the file before Done
	}
	if p.groups != nil {
		_ = p.groups.Ended(p.attemptID) // a lost line only makes a restarted agent signal a dead group
	}
	ex := exitOf(p.cmd.ProcessState, err)
	ex.Lingering = append(lingering, end.lingering...)
	p.mu.Lock()
	if p.stopping {
		ex.State, ex.Reason, ex.Cause = stoppedState(p.stopCause), p.stopReason, p.stopCause
		if code, ok := berth.CauseExitCode(p.stopCause); ok {
			ex.ExitCode = &code
		}
	} else {
		end.apply(&ex)
	}
	p.exit = ex
	p.mu.Unlock()
	close(p.done)
}

// stoppedState is the state of an attempt stopped for cause: cancelled
// when a user or an operator stopped it, failed when a watchdog did.
func stoppedState(cause string) berth.AttemptState {
	if cause == "" || cause == berth.CauseOperator {
		return berth.AttemptCancelled
	}
	return berth.AttemptFailed
}

// exitOf turns the leader's wait status into an Exit.
func exitOf(ps *os.ProcessState, err error) Exit {
	if ps == nil {
		return Exit{State: berth.AttemptFailed, Reason: fmt.Sprintf("wait: %v", err)}
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	switch {
	case ok && ws.Signaled():
		r := "killed by signal " + signalName(ws.Signal())
		if ws.CoreDump() {
			r += " (core dumped)"
		}
		return Exit{State: berth.AttemptFailed, Reason: r}
	case ps.ExitCode() == 0:
		code := 0
		return Exit{State: berth.AttemptSucceeded, ExitCode: &code}
	default:
		code := ps.ExitCode()
		return Exit{State: berth.AttemptFailed, ExitCode: &code, Reason: "exit code " + strconv.Itoa(code)}
	}
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGABRT: "SIGABRT", syscall.SIGALRM: "SIGALRM", syscall.SIGBUS: "SIGBUS",
	syscall.SIGFPE: "SIGFPE", syscall.SIGHUP: "SIGHUP", syscall.SIGILL: "SIGILL",
	syscall.SIGINT: "SIGINT", syscall.SIGKILL: "SIGKILL", syscall.SIGPIPE: "SIGPIPE",
	syscall.SIGQUIT: "SIGQUIT", syscall.SIGSEGV: "SIGSEGV", syscall.SIGSYS: "SIGSYS",
	syscall.SIGTERM: "SIGTERM", syscall.SIGTRAP: "SIGTRAP", syscall.SIGUSR1: "SIGUSR1",
	syscall.SIGUSR2: "SIGUSR2", syscall.SIGXCPU: "SIGXCPU", syscall.SIGXFSZ: "SIGXFSZ",
}

func signalName(s syscall.Signal) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	return "signal " + strconv.Itoa(int(s))
}

const (
	sysPidfdOpen = 434 // pidfd_open(2), the same number on every Linux architecture
	pPID         = 1   // P_PID for waitid(2)
	wNOWAIT      = 0x1000000
)

// siginfo is the start of waitid's siginfo_t: si_signo is SIGCHLD when a
// child was waitable, 0 when WNOHANG found none.
type siginfo struct {
	signo int32
	_     [124]byte
}

// awaitExit returns once the child pid has exited, leaving it unreaped. It
// waits on a pidfd through the runtime's poller, so no thread blocks while
// the job runs; without pidfds it blocks in waitid.
func awaitExit(pid int) {
	if fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0); errno == 0 {
		if pollExit(int(fd), pid) {
			return
		}
	}
	for {
		var info siginfo
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info)), syscall.WEXITED|wNOWAIT, 0, 0)
		if errno != syscall.EINTR {
			return
		}
	}
}

// pollExit waits for the pidfd to become readable (the process exited) and
// reports whether it could; it closes fd.
func pollExit(fd, pid int) bool {
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return false
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	exited := false
	err = rc.Read(func(uintptr) bool {
		exited = hasExited(pid)
		return exited
	})
	return err == nil && exited
}

// hasExited reports, without blocking or reaping, whether the child pid has
// exited. When it cannot tell it says yes, so the caller goes on to reap.
func hasExited(pid int) bool {
	for {
		var info siginfo
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info)), syscall.WEXITED|syscall.WNOHANG|wNOWAIT, 0, 0)
		switch errno {
		case 0:
			return info.signo != 0
		case syscall.EINTR:
			continue
		default:
			return true
		}
	}
}

// awaitGroup waits, at most limit, until no member of process group pgid
// is alive (members that are zombies waiting for init to reap them count
// as dead), and returns the members still alive then, as /proc shows
// them. Every member has already been sent SIGKILL.
func awaitGroup(pgid int, limit time.Duration) []int {
	if syscall.Kill(-pgid, 0) == syscall.ESRCH {
		return nil // the common case: the leader was alone
	}
	live := groupMembers(pgid)
	deadline := time.Now().Add(limit)
	for delay := time.Millisecond; len(live) > 0 && time.Now().Before(deadline); delay = min(2*delay, 50*time.Millisecond) {
		time.Sleep(delay)
		live = slices.DeleteFunc(live, func(pid int) bool { return !memberAlive(pid, pgid) })
	}
	return live
}

// groupMembers lists the live processes of group pgid from /proc.
func groupMembers(pgid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err == nil && memberAlive(pid, pgid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// memberAlive reports whether pid exists, is in group pgid and is not a
// zombie.
func memberAlive(pid, pgid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 3 || f[0] == "Z" || f[0] == "X" || f[0] == "x" {
		return false
	}
	g, err := strconv.Atoi(f[2])
	return err == nil && g == pgid
}

// NoopExecutor runs nothing: every attempt has succeeded with exit code 0
// the moment it starts. It creates no file. The benchmark uses it to
// measure the scheduler, store and protocol alone.
type NoopExecutor struct{}

var _ Executor = NoopExecutor{}

// Start returns a Process that has already succeeded; it never errors.
func (NoopExecutor) Start(context.Context, Spec) (Process, error) {
	p := &doneProcess{noFiles: true}
	p.exit = Exit{State: berth.AttemptSucceeded, ExitCode: &p.code}
	return p, nil
}

// closed is the Done channel of every process that ended before it began.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// doneProcess is a Process that had ended when it was returned.
type doneProcess struct {
	exit    Exit
	code    int
	noFiles bool // no log file or working directory was made for it
	output  bool // its log file says why it could not start
}

func doneWith(ex Exit) *doneProcess { return &doneProcess{exit: ex} }

// failedProcess is an attempt that could not start.
func failedProcess(reason string) Process {
	return doneWith(Exit{State: berth.AttemptFailed, Reason: reason})
}

// Exit codes of a command that could not be run, as a shell gives them.
const (
	exitNotExecutable = 126 // found, but not executable
	exitNotFound      = 127 // no such command
)

// notStarted ends an attempt whose command could not be started, with
// exit code code (nil: none): like a shell, and like Slurm's output file,
// it says why in the attempt's output (as stderr's, with streams). It
// closes log.
func notStarted(log *os.File, streams *Streams, err error, code *int) Process {
	reason := "start: " + err.Error()
	note := fmt.Sprintf("berth: cannot %s\n", reason)
	if streams != nil {
		streams.note(log, note)
	} else {
		_, _ = log.WriteString(note)
	}
	_ = log.Close()
	return &doneProcess{exit: Exit{State: berth.AttemptFailed, ExitCode: code, Reason: reason}, output: true}
}

// execFailureCode is the exit code a shell gives a command that failed to
// start with err: 127 when there is no such command, else 126.
func execFailureCode(err error) *int {
	code := exitNotExecutable
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		code = exitNotFound
	}
	return &code
}

func (p *doneProcess) Done() <-chan struct{} { return closed }
func (p *doneProcess) Exit() Exit            { return p.exit }
func (p *doneProcess) Stop(_, _ string) bool { return false }
func (p *doneProcess) Kill(_, _ string)      {}
func (p *doneProcess) Progressed()           {}
