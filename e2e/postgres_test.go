package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/postgres/pgtest"
)

// runPSQL runs one SQL statement with the psql client, as another system
// sharing the database would, and returns its output.
func runPSQL(t *testing.T, url, statement string) (string, error) {
	t.Helper()
	bin, err := exec.LookPath("psql")
	if err != nil {
		matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/psql")
		if len(matches) == 0 {
			t.Fatal("no psql client: install PostgreSQL (apt-get install postgresql-client)")
		}
		bin = matches[len(matches)-1]
	}
	out, err := exec.Command(bin, "-v", "ON_ERROR_STOP=1", "-X", "-q", "-d", url, "-c", statement).CombinedOutput()
	return string(out), err
}

// psql is runPSQL for a statement that must succeed.
func psql(t *testing.T, url, statement string) {
	t.Helper()
	if out, err := runPSQL(t, url, statement); err != nil {
		t.Fatalf("psql %q: %v\n%s", statement, err, out)
	}
}

// TestPlainSQLTurnsWorkerOff runs Berth on PostgreSQL and turns a busy
// worker off with a plain INSERT … ON CONFLICT in psql: the trigger wakes
// the server at once (its read-back poll is set to an hour), the running
// job is stopped per the row's hard policy and requeued, and the worker
// parks.
func TestPlainSQLTurnsWorkerOff(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	cl := newCluster(t, "--store", url, "--grace", "1s", "--control-poll", "1h")
	cl.addAgent("pg1")
	dir := t.TempDir()
	// The first run holds on; the rerun after the worker is back on succeeds.
	j := cl.submit(shellJob(`if [ -e ` + dir + `/ran ]; then exit 0; fi; touch ` + dir + `/ran; echo $$ > ` + dir + `/pid.tmp; mv ` +
		dir + `/pid.tmp ` + dir + `/pid; sleep 1000`))[0]
	pgid := cl.readPID(dir + "/pid")
	cl.awaitState(j.ID, 30*time.Second, berth.JobRunning)

	psql(t, url, `INSERT INTO worker_controls (host_label, queue, desired_state, stop_policy, requested_by)
		VALUES ('pg1', '*', 'off', 'hard', 'rails')
		ON CONFLICT (host_label, queue) DO UPDATE SET desired_state = excluded.desired_state,
		  stop_policy = excluded.stop_policy, requested_by = excluded.requested_by, updated_at = now()`)
	cl.eventually(15*time.Second, "the job's process group to die", func() bool { return !alive(pgid) })
	cl.awaitWorker("pg1", berth.WorkerParked)
	d := cl.awaitState(j.ID, 30*time.Second, berth.JobPending)
	if len(d.AttemptList) != 1 || d.AttemptList[0].State != berth.AttemptStopped || !strings.Contains(d.AttemptList[0].Reason, "by rails") {
		t.Fatalf("attempts after the SQL stop: %+v, want one stopped by rails", d.AttemptList)
	}
	cl.awaitEvent(10*time.Second, "worker.control by rails", func(e map[string]any) bool {
		return e["type"] == "worker.control" && e["host"] == "pg1" && e["actor"] == "rails" && e["desired"] == "off"
	})

	// Invalid values are refused by the table itself.
	out, err := runPSQL(t, url, `INSERT INTO worker_controls (host_label, queue, desired_state) VALUES ('pg1', 'gpu', 'maybe')`)
	if err == nil || !strings.Contains(out, "check constraint") {
		t.Fatalf("desired_state 'maybe' was accepted: %v %s", err, out)
	}

	psql(t, url, `UPDATE worker_controls SET desired_state = 'on', updated_at = now() WHERE host_label = 'pg1'`)
	cl.awaitSuccess(j.ID, "job after the SQL on")
}

// TestServerRefusesNewerSchema starts a server on a database whose schema
// is newer than the binary knows: it exits with a clear message.
func TestServerRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	cl := newCluster(t, "--store", url)
	cl.server.stop()
	psql(t, url, `INSERT INTO schema_migrations (version) VALUES (9999)`)
	p := start(t, "server on a newer schema", "server", "--store", url, "--listen", freeAddr(t), "--data-dir", t.TempDir())
	if _, ok := p.out.await("newer than this berth", 30*time.Second); !ok {
		t.Fatalf("server on a newer schema did not refuse with a clear message:\n%s", p.out)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("server on a newer schema kept running")
	}
	if p.cmd.ProcessState.ExitCode() == 0 {
		t.Fatal("server on a newer schema exited 0")
	}
}
