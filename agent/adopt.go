package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// A service keeps running when its agent stops or dies, and a restarted
// agent adopts it: its process group, output file, port and readiness
// check carry on, and the server keeps the attempt when the agent reports
// it running within its lease (seed 002's port recovery). Services whose
// job carries secrets are not adopted: their values are never written to
// disk, and without them their output could not be masked.

// adoptable reports whether m's attempt may outlive its agent.
func adoptable(m *wire.JobAssign) bool { return m.Service != nil && len(m.Secrets) == 0 }

// serviceRecord is what the agent keeps on disk of a running service
// attempt for a restarted agent to adopt it.
type serviceRecord struct {
	Assign *wire.JobAssign `json:"assign"`
	Port   int             `json:"port"`
}

func (s *supervisor) servicesDir() string { return filepath.Join(s.cfg.DataDir, "services") }

// saveServiceRecord writes m's record (write and rename, mode 0600).
func (s *supervisor) saveServiceRecord(m *wire.JobAssign, port int) error {
	data, err := json.Marshal(serviceRecord{Assign: m, Port: port})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.servicesDir(), 0o700); err != nil {
		return err
	}
	return replaceFile(filepath.Join(s.servicesDir(), m.AttemptID+".json"), data, 0o600)
}

// dropServiceRecord removes an ended attempt's record, if any.
func (s *supervisor) dropServiceRecord(id string) {
	_ = os.Remove(filepath.Join(s.servicesDir(), id+".json"))
}

// adoptServices takes over, from the process groups a previous agent left
// (by attempt id), those of service attempts with a record and a live
// group; it removes those from groups and drops the other records. The
// adopted attempts are followed once Run starts.
func (s *supervisor) adoptServices(groups map[string]int) error {
	entries, err := os.ReadDir(s.servicesDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("adopt services: %w", err)
	}
	var kept []string
	for _, e := range entries {
		id := e.Name()[:len(e.Name())-len(filepath.Ext(e.Name()))]
		pgid, live := groups[id]
		rec, err := readServiceRecord(filepath.Join(s.servicesDir(), e.Name()))
		if !live || err != nil || rec.Assign.AttemptID != id || syscall.Kill(-pgid, 0) != nil {
			s.dropServiceRecord(id)
			continue
		}
		delete(groups, id)
		proc := adoptProcess(pgid, rec.Assign.Grace)
		at := &attempt{id: id, dir: filepath.Join(s.attDir, id), scratch: rec.Assign.Workdir == "",
			log: filepath.Join(s.attDir, id) + ".log", queue: rec.Assign.Queue, gpus: rec.Assign.GPUs, proc: proc,
			keep: s.cfg.KeepServices}
		s.attempts[id] = at
		s.adopted = append(s.adopted, adoption{at: at, assign: rec.Assign, svc: &serviceRun{port: rec.Port}, proc: proc})
		kept = append(kept, id)
		s.log.Info("adopted a service the previous agent left running", "attempt", id, "pgid", pgid, "port", rec.Port)
	}
	if _, err := s.ports.Recover(kept); err != nil {
		return fmt.Errorf("adopt services: %w", err)
	}
	return nil
}

func readServiceRecord(path string) (*serviceRecord, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rec serviceRecord
	if err := json.Unmarshal(data, &rec); err != nil || rec.Assign == nil {
		return nil, fmt.Errorf("service record %s: malformed", path)
	}
	return &rec, nil
}

// adoption is an attempt adopted at start, followed once Run starts.
type adoption struct {
	at     *attempt
	assign *wire.JobAssign
	svc    *serviceRun
	proc   *adoptedProcess
}

// follow watches the adopted group and follows the attempt like a started
// one.
func (ad adoption) follow(ctx context.Context, s *supervisor) {
	id := ad.at.id
	go ad.proc.watch(func() {
		if s.cgroups != nil {
			s.cgroups.killAttempt(id, nil) // what left its group, started by the agent before
		}
		_ = s.groups.Ended(id)
	})
	s.follow(ctx, ad.at, ad.assign, ad.svc)
}

// adoptedProcess is a process group a previous agent started: not a child
// of this one, so its exit status is unknown; it has ended once no member
// of its group is left.
type adoptedProcess struct {
	pgid  int
	grace time.Duration
	done  chan struct{}

	mu       sync.Mutex
	stopping bool
	cause    string
	reason   string
}

// adoptedPoll is how often an adopted group is checked for members.
const adoptedPoll = 200 * time.Millisecond

// adoptProcess returns group pgid as a Process; watch follows it.
func adoptProcess(pgid int, grace time.Duration) *adoptedProcess {
	if grace <= 0 {
		grace = DefaultGrace
	}
	return &adoptedProcess{pgid: pgid, grace: grace, done: make(chan struct{})}
}

// watch waits until no member of the group is left, runs ended and closes
// Done.
func (p *adoptedProcess) watch(ended func()) {
	for syscall.Kill(-p.pgid, 0) == nil {
		time.Sleep(adoptedPoll) // not our child: no exit to wait for
	}
	ended()
	close(p.done)
}

func (p *adoptedProcess) Done() <-chan struct{} { return p.done }

// Exit says how the adopted group ended: as stopped when this agent
// stopped it, else failed with no exit code.
func (p *adoptedProcess) Exit() Exit {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stopping {
		return Exit{State: berth.AttemptFailed, Reason: "exited after the agent restarted (exit status unknown: not the agent's child)"}
	}
	ex := Exit{State: stoppedState(p.cause), Reason: p.reason, Cause: p.cause}
	if code, ok := berth.CauseExitCode(p.cause); ok {
		ex.ExitCode = &code
	}
	return ex
}

// Stop sends SIGTERM to the group and SIGKILL after the grace period.
func (p *adoptedProcess) Stop(cause, reason string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return false
	default:
	}
	if p.stopping {
		return false
	}
	p.stopping, p.cause, p.reason = true, cause, reason
	if p.reason == "" {
		p.reason = "stopped"
	}
	_ = syscall.Kill(-p.pgid, syscall.SIGTERM)
	time.AfterFunc(p.grace, func() { _ = syscall.Kill(-p.pgid, syscall.SIGKILL) })
	return true
}

// Kill sends SIGKILL to the group now.
func (p *adoptedProcess) Kill(cause, reason string) {
	p.mu.Lock()
	if !p.stopping {
		p.stopping, p.cause, p.reason = true, cause, reason
		if p.reason == "" {
			p.reason = "killed"
		}
	}
	p.mu.Unlock()
	_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
}

// Progressed does nothing: an adopted service has no stall watchdog.
func (p *adoptedProcess) Progressed() {}
