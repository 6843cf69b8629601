package e2e

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
)

// TestSubmitRefusesWhatNoWorkerCouldRun: with one worker of 2 T4s, berth
// submit of a job asking 4 GPUs, or of a gang of two 2-GPU members, fails
// naming the field and what the worker has, and the server stores
// nothing; with --hold-until-fits the job is accepted with that warning
// and waits, saying why.
func TestSubmitRefusesWhatNoWorkerCouldRun(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	cl.addAgent("g1")
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--gpus", "4"}, "resources.gpus: 4 requested; the largest worker has 2xT4:16GiB"},
		{[]string{"--gpus", "2", "--nodes", "2", "--array", "3"}, "nodes: 2 requested; only 1 worker has 2 GPUs"},
	} {
		args := append(append([]string{"submit", "--server", cl.url}, tc.flags...), "--", "true")
		out, errOut, err := runCLI(t, "", "", args...)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || out != "" || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "--hold-until-fits") {
			t.Fatalf("berth %s: %v\nstdout %q\nstderr %q\nwant a failure naming %q and --hold-until-fits", strings.Join(args, " "), err, out, errOut, tc.want)
		}
	}
	list, err := cl.c.Jobs(context.Background(), client.ListOptions{})
	if err != nil || len(list.Jobs) != 0 {
		t.Fatalf("jobs after the refusals: %v, %v; want none", list, err)
	}

	out, errOut, err := runCLI(t, "", "", "submit", "--server", cl.url, "--gpus", "4", "--hold-until-fits", "--", "true")
	id := strings.TrimSpace(out)
	if err != nil || id == "" ||
		!strings.Contains(errOut, "berth: warning: resources.gpus: 4 requested; the largest worker has 2xT4:16GiB") {
		t.Fatalf("held submit: %v\nstdout %q\nstderr %q\nwant an id and the warning", err, out, errOut)
	}
	if d := cl.job(id); d.State != berth.JobPending || !strings.Contains(d.Reason, "no worker has 4 GPUs") {
		t.Fatalf("held job: %s, reason %q; want pending, no worker has 4 GPUs", d.State, d.Reason)
	}
}
