package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// An agent that dies (kill -9, a crash, the OOM killer) cannot stop its
// attempts: only each attempt's leader dies with it (Pdeathsig), while the
// rest of its process group, and whatever left the group with setsid, would
// go on and do the attempt's work a second time once the server reassigns
// it. So the agent starts one watchdog process (Config.Watchdog) in a
// session of its own, connected by a pipe the agent never writes to until
// it stops cleanly, when it writes watchdogStop. When the pipe ends without
// that word, the agent died: the watchdog kills, at once, every attempt the
// group journal says is running (its group, and the processes anywhere
// whose environment carries its BERTH_ATTEMPT_ID), but the services a
// restarted agent adopts. The watchdog holds the agent's data-dir lock
// meanwhile, so that no new agent starts on the data dir, and rewrites the
// journal, before it is done. It costs an attempt nothing: the journal
// line the agent appends at each start and end is all it reads.

// watchdogStop is what the agent writes to its watchdog when it stops
// cleanly: the watchdog then exits without killing anything.
const watchdogStop = "stop\n"

// escapeRounds bounds how often the /proc scan is repeated while it still
// finds processes to kill (an escaped process may fork between a scan
// and its kill).
const escapeRounds = 10

// watchdog is the agent's end of its watchdog process.
type watchdog struct {
	cmd      *exec.Cmd
	pipe     *os.File   // the write end; closing it without watchdogStop means the agent died
	exited   chan error // receives the watchdog's wait error once it has exited
	released atomic.Bool
}

// startWatchdog runs argv with the data dir appended as its last argument,
// in a session of its own, its stdin the read end of a pipe and lock (the
// agent's open data-dir lock file) as fd 3, so that the lock outlives the
// agent until the watchdog is done. A watchdog that exits before release
// is logged: the agent's jobs would then outlive it if it died.
func startWatchdog(argv []string, dataDir string, lock *os.File, log *slog.Logger) (*watchdog, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("agent: watchdog: %w", err)
	}
	defer r.Close()
	cmd := exec.Command(argv[0], append(argv[1:len(argv):len(argv)], dataDir)...)
	cmd.Stdin, cmd.Stderr = r, os.Stderr
	cmd.ExtraFiles = []*os.File{lock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("agent: watchdog: %w", err)
	}
	wd := &watchdog{cmd: cmd, pipe: w, exited: make(chan error, 1)}
	go func() {
		err := cmd.Wait()
		if !wd.released.Load() {
			log.Error("the agent's watchdog exited: if this agent dies, its jobs outlive it until an agent starts on its data dir",
				"pid", cmd.Process.Pid, "err", err)
		}
		wd.exited <- err
	}()
	return wd, nil
}

// watchdogExit is how long release waits for the watchdog to exit before
// it kills it.
const watchdogExit = 5 * time.Second

// release tells the watchdog the agent stopped cleanly and waits for it to
// exit, killing it if it has not within watchdogExit.
func (w *watchdog) release() error {
	w.released.Store(true)
	_, werr := w.pipe.WriteString(watchdogStop)
	cerr := w.pipe.Close()
	select {
	case err := <-w.exited:
		return errors.Join(werr, cerr, err)
	case <-time.After(watchdogExit):
		_ = w.cmd.Process.Kill()
		<-w.exited
		return errors.Join(werr, cerr, fmt.Errorf("watchdog: still running %v after the agent stopped; killed", watchdogExit))
	}
}

// Watchdog is the body of an agent's watchdog process (see
// Config.Watchdog): it reads agent, the pipe from the agent, to its end.
// When the agent wrote the clean-stop word first, it returns nil having
// done nothing. Otherwise the agent died, and it kills the attempts that
// the group journal in dataDir says were running, but the services a
// restarted agent adopts (those with a record in dataDir/services), with
// KillAttempts, logging what it killed. It returns the error of reading
// the pipe or the journal, or of signalling; it goes on past each.
func Watchdog(dataDir string, agent io.Reader, log *slog.Logger) error {
	said, rerr := io.ReadAll(agent)
	if rerr == nil && string(said) == watchdogStop {
		return nil
	}
	live, jerr := StaleGroups(filepath.Join(dataDir, "groups"))
	for id := range live {
		if _, err := os.Stat(filepath.Join(dataDir, "services", id+".json")); err == nil {
			delete(live, id) // a service, left running for the next agent to adopt
		}
	}
	groups, escaped, kerr := KillAttempts(live, savedWorkerID(dataDir))
	closeWorkerCgroups(dataDir)
	if groups+escaped > 0 {
		log.Warn("the agent died: killed its attempts", "attempts", len(live), "groups", groups, "escaped_processes", escaped)
	}
	if rerr != nil {
		rerr = fmt.Errorf("watchdog: read the agent's pipe: %w", rerr)
	}
	return errors.Join(rerr, jerr, kerr)
}

// KillAttempts sends SIGKILL to the process group of each attempt of live
// (attempt id → process group), but its own group, then to every process
// in those attempts' cgroups under worker (removing the cgroups; under
// every worker of this process's cgroup when worker is empty), and then to every
// process whose environment carries one of those attempts' ids
// (BERTH_ATTEMPT_ID), found in /proc: those that left the group (setsid)
// keep their environment. It returns how many groups were alive and how
// many escaped processes it killed, and the first error of signalling or
// of listing /proc; processes it may not signal or read (another user's)
// are skipped.
func KillAttempts(live map[string]int, worker string) (groups, escaped int, err error) {
	groups, err = killGroups(live)
	if len(live) == 0 {
		return groups, 0, err
	}
	ids := make(map[string]bool, len(live))
	pgids := make(map[int]bool, len(live))
	for id, pgid := range live {
		ids[id], pgids[pgid] = true, true
	}
	escaped = killAttemptCgroups(worker, ids, pgids) // what stayed in their cgroups; the /proc scan finds those that left the group and have none
	killed := map[int]bool{}
	for range escapeRounds {
		n, serr := killEscaped(ids, pgids, killed)
		escaped += n
		if serr != nil || n == 0 {
			return groups, escaped, errors.Join(err, serr)
		}
	}
	return groups, escaped, err
}

// killEscaped sends SIGKILL to every process but this one, outside the
// groups of pgids (already signalled) and not in killed, whose environment
// sets BERTH_ATTEMPT_ID to one of ids. It adds those it signalled to
// killed and returns how many they were.
func killEscaped(ids map[string]bool, pgids, killed map[int]bool) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("kill escaped: %w", err)
	}
	self, n := os.Getpid(), 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || killed[pid] || !ids[attemptOf(pid)] {
			continue
		}
		if pgid, err := syscall.Getpgid(pid); err != nil || pgids[pgid] {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed[pid] = true
			n++
		}
	}
	return n, nil
}

// attemptOf returns the BERTH_ATTEMPT_ID in the environment process pid
// started with, or "" when it has none or cannot be read (a zombie's).
func attemptOf(pid int) string {
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return ""
	}
	const key = "BERTH_ATTEMPT_ID="
	for kv := range bytes.SplitSeq(env, []byte{0}) {
		if id, ok := bytes.CutPrefix(kv, []byte(key)); ok {
			return string(id)
		}
	}
	return ""
}
