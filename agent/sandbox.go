package agent

import (
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// Sandbox confines the processes of one attempt: the Unix account they run
// as (--run-as map) and the cgroup they run in, with the job's CPU and
// memory limits (where the agent has cgroups). The attempt's own command
// and every command run in it later start through its Sandbox (Start), so
// that they share its account, its limits and its end: when the attempt
// ends, every process in its cgroup is killed. A nil *Sandbox confines
// nothing: its processes run as the agent, in the agent's cgroup.
type Sandbox struct {
	acct    *account // nil: the agent's account
	cgroups *cgroups // where its cgroup is made; nil: none
	attempt string
	cpus    float64
	memory  berth.Bytes

	mu    sync.Mutex
	cg    *attemptCgroup // made by the first Start
	ended bool
}

// sandbox returns the Sandbox of m's attempt, or why it may not run (its
// user has no account it may run as); nil when it is not confined.
func (s *supervisor) sandbox(m *wire.JobAssign) (*Sandbox, error) {
	acct, err := accountOf(s.cfg, m.User)
	if err != nil || (acct == nil && s.cgroups == nil) {
		return nil, err
	}
	return &Sandbox{acct: acct, cgroups: s.cgroups, attempt: m.AttemptID, cpus: m.CPUs, memory: m.Memory}, nil
}

// isolation says how the supervisor confines its attempts
// (berth.Isolation*).
func (s *supervisor) isolation() string {
	if s.cgroups == nil {
		return berth.IsolationNone
	}
	return s.cgroups.host.isolation()
}

// env is HOME, USER and LOGNAME of the attempt's account, none when it
// runs as the agent.
func (sb *Sandbox) env() []string {
	if sb == nil || sb.acct == nil {
		return nil
	}
	return sb.acct.env()
}

// mapped reports whether the attempt runs as an account of its own.
func (sb *Sandbox) mapped() bool { return sb != nil && sb.acct != nil }

// own gives the attempt's account the files at paths (its working
// directory and log); nothing when it runs as the agent.
func (sb *Sandbox) own(paths ...string) error {
	if !sb.mapped() {
		return nil
	}
	return sb.acct.chown(paths...)
}

// Start starts cmd as the attempt's account (uid, gid, supplementary
// groups), in the attempt's cgroup, which the first Start makes with its
// limits. It refuses once the attempt has ended.
func (sb *Sandbox) Start(cmd *exec.Cmd) error {
	if sb == nil {
		return cmd.Start()
	}
	if sb.acct != nil {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.Credential = sb.acct.credential()
	}
	if sb.cgroups == nil {
		return cmd.Start()
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.ended {
		return errors.New("the attempt has ended")
	}
	if sb.cg == nil {
		cg, err := sb.cgroups.create(sb.attempt, sb.cpus, sb.memory)
		if err != nil {
			return err
		}
		sb.cg = cg
	}
	return sb.cg.start(cmd)
}

// sandboxEnd is what was left of a Sandbox when its attempt ended.
type sandboxEnd struct {
	oomKills  int    // processes the kernel killed at the memory limit
	memory    string // the limit; empty: none
	lingering []int  // processes that outlived SIGKILL for the grace period
}

// end kills every process left in the attempt's cgroup, waiting at most
// grace for them to die, removes the cgroup and says what it found. From
// then on Start refuses.
func (sb *Sandbox) end(grace time.Duration) sandboxEnd {
	if sb == nil {
		return sandboxEnd{}
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	sb.ended = true
	if sb.cg == nil {
		return sandboxEnd{}
	}
	e := sandboxEnd{lingering: sb.cg.killAll(grace), oomKills: sb.cg.oomKills()}
	if sb.memory > 0 {
		e.memory = sb.memory.String()
	}
	sb.cg.release(e.lingering)
	return e
}

// apply makes ex, the end of an attempt no one stopped, an end with cause
// oom when the kernel killed a process of it for memory and it did not
// succeed.
func (e sandboxEnd) apply(ex *Exit) {
	if e.oomKills == 0 || ex.State == berth.AttemptSucceeded {
		return
	}
	code, _ := berth.CauseExitCode(berth.CauseOOM)
	why := "the machine ran out of memory"
	if e.memory != "" {
		why = "at its memory limit (" + e.memory + ")"
	}
	ex.State, ex.Cause, ex.ExitCode = berth.AttemptFailed, berth.CauseOOM, &code
	ex.Reason = fmt.Sprintf("oom: killed by the kernel %s; %s", why, ex.Reason)
}
