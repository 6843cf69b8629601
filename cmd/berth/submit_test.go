package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
)

// TestSubmitSaysWhenItIsAReplay: a repeat of a submission with the user's
// idempotency key prints the first submission's ids (or jobs) on stdout
// and exits 0, and says on stderr that they are the first submission's; a
// first submission, another user's under the same key included, says
// nothing of that (only, on this server with no workers, that no worker
// serves the queue); another request under a used key fails with the
// conflict.
func TestSubmitSaysWhenItIsAReplay(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	note := "berth: already submitted with idempotency key nightly-eval (the jobs below are the first submission's)\n"
	unserved := `berth: warning: no worker serves queue "default": the jobs wait until one does (berth workers lists the queues served)` + "\n"
	code, first, errOut := c.run("submit", "--idempotency-key", "nightly-eval", "--", "echo", "hi")
	if code != 0 || len(strings.Fields(first)) != 1 || errOut != unserved {
		t.Fatalf("first submit: exit %d, %q, %q; want one id and only the warning %q", code, first, errOut, unserved)
	}
	code, out, errOut := c.run("submit", "--idempotency-key", "nightly-eval", "--", "echo", "hi")
	if code != 0 || out != first || errOut != note {
		t.Errorf("repeat: exit %d, stdout %q, stderr %q; want exit 0, %q and %q", code, out, errOut, first, note)
	}
	code, out, errOut = c.run("submit", "--idempotency-key", "nightly-eval", "-o", "json", "--", "echo", "hi")
	if code != 0 || errOut != note || !strings.Contains(out, `"id": "`+strings.TrimSpace(first)+`"`) {
		t.Errorf("repeat -o json: exit %d, stdout %q, stderr %q; want exit 0, job %s and %q", code, out, errOut, strings.TrimSpace(first), note)
	}

	jobs := runJSON[[]berth.Job](c, "submit", "--user", "alice", "--idempotency-key", "nightly-eval", "-o", "json", "--", "echo", "alice")
	if len(jobs) != 1 || jobs[0].ID == strings.TrimSpace(first) || jobs[0].User != "alice" {
		t.Fatalf("alice's submit under the same key printed %+v, want a job of her own", jobs)
	}

	code, out, errOut = c.run("submit", "--idempotency-key", "nightly-eval", "--", "echo", "bye")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "idempotency_key") || !strings.Contains(errOut, "(conflict)") ||
		!strings.Contains(errOut, strings.TrimSpace(first)) || strings.Count(errOut, "\n") != 1 {
		t.Errorf("another request under the key: exit %d, stdout %q, stderr %q; want exit %d and one conflict line naming %s",
			code, out, errOut, exitUsage, strings.TrimSpace(first))
	}
	if n := len(c.listJobs()); n != 2 {
		t.Errorf("%d jobs stored, want 2", n)
	}
}

// TestJobTrees: submit --parent files a job under another, jobs --parent
// lists a job's children, job shows the parent, and cancelling the parent
// cancels the child.
func TestJobTrees(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	_, out, _ := c.run("submit", "--", "sleep", "1000")
	parent := strings.TrimSpace(out)
	_, out, _ = c.run("submit", "--parent", parent, "--array", "2", "--", "sleep", "1000")
	children := strings.Fields(out)
	c.run("submit", "--", "sleep", "1000") // not a child
	listed := listJSON[berth.Job](c, "jobs", "--parent", parent, "-o", "json")
	if len(listed) != 2 || listed[0].ID != children[1] || listed[1].ID != children[0] {
		t.Fatalf("jobs --parent listed %d jobs, want the 2 children %v, newest first", len(listed), children)
	}
	if code, out, _ := c.run("job", children[0]); code != 0 || !strings.Contains(out, "Parent:    "+parent+"\n") {
		t.Errorf("job of a child: exit %d, %q; want a Parent line", code, out)
	}
	if code, _, errOut := c.run("submit", "--parent", "nope", "--", "true"); code != exitUsage || !strings.Contains(errOut, "parent:") {
		t.Errorf("submit --parent nope: exit %d, %q; want 2 naming parent", code, errOut)
	}
	c.run("cancel", parent)
	for _, j := range listJSON[berth.Job](c, "jobs", "--parent", parent, "-o", "json") {
		if j.State != berth.JobCancelled {
			t.Errorf("child %s after its parent was cancelled: %s", j.ID, j.State)
		}
	}
}

// TestSubmitWaitJSON: submit -o json --wait prints the jobs as they ended,
// once the wait is over, and the wait's summary on stderr.
func TestSubmitWaitJSON(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	var out bytes.Buffer
	errOut := newOutputWatch()
	m := &Main{Stdout: &out, Stderr: errOut, Getenv: func(k string) string {
		if k == "BERTH_SERVER" {
			return c.url
		}
		return ""
	}}
	code := make(chan int, 1)
	go func() {
		code <- m.Run(t.Context(), []string{"submit", "--name", "sweep", "--array", "2", "--wait", "-o", "json", "--", "sleep", "1000"})
	}()
	// No worker serves the queue: the warning comes once the jobs are
	// stored, before the wait.
	errOut.await(t, "submit --wait", "no worker serves")
	if code, _, _ := c.run("cancel", "--name", "sweep"); code != 0 {
		t.Fatalf("cancel --name sweep: exit %d", code)
	}
	if got := <-code; got != exitFailed {
		t.Errorf("submit --wait of cancelled jobs: exit %d, want %d", got, exitFailed)
	}
	var jobs []berth.Job
	if err := json.Unmarshal(out.Bytes(), &jobs); err != nil || len(jobs) != 2 {
		t.Fatalf("stdout %q (%v), want the 2 jobs as one JSON array", out.String(), err)
	}
	for _, j := range jobs {
		if j.State != berth.JobCancelled {
			t.Errorf("job %s printed %s, want cancelled, as it ended", j.ID, j.State)
		}
	}
	if !strings.Contains(errOut.String(), "2 cancelled") {
		t.Errorf("stderr %q, want the wait's summary", errOut.String())
	}
}
