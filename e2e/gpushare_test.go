package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// TestFractionalGPUsShareOneGPU runs a real server and a real agent with
// one fake GPU and an MPS pipe directory configured. Two jobs asking half
// a GPU — one submitted with `berth submit --gpus 0.5`, one from a YAML
// job file with `gpus: 0.5` — run at once on that GPU, both seeing
// CUDA_VISIBLE_DEVICES=0, BERTH_GPU_FRACTION=0.5 and the MPS client
// limits; a third half waits, saying why (as does `berth job`), and so
// does a whole-GPU job: the shared GPU is never given whole. Once the
// first two end, the third runs.
func TestFractionalGPUsShareOneGPU(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	mps := t.TempDir()
	cl.addAgent("g1", "--gpus", "1xH100:80GiB", "--mps-pipe-dir", mps)
	dir := t.TempDir()
	release := filepath.Join(dir, "release")
	// Each job writes what it sees, then holds its share until released.
	script := `echo "$CUDA_VISIBLE_DEVICES $BERTH_GPU_FRACTION $CUDA_MPS_ACTIVE_THREAD_PERCENTAGE $CUDA_MPS_PINNED_DEVICE_MEM_LIMIT $CUDA_MPS_PIPE_DIRECTORY" > ` +
		dir + `/$BERTH_JOB_ID.env; while [ ! -e ` + release + ` ]; do sleep 0.05; done`

	first := strings.TrimSpace(mustCLI(t, "", "", "submit", "--server", cl.url, "--gpus", "0.5", "--", "sh", "-c", script))
	jobFile := filepath.Join(dir, "half.yaml")
	if err := os.WriteFile(jobFile, []byte("command: [sh, -c, '"+script+"']\nresources:\n  gpus: 0.5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	second := strings.TrimSpace(mustCLI(t, "", "", "submit", "--server", cl.url, "-f", jobFile))
	seen := map[string]string{}
	for _, id := range []string{first, second} {
		cl.awaitState(id, 30*time.Second, berth.JobRunning)
		cl.eventually(30*time.Second, "job "+id+" wrote its environment", func() bool {
			b, err := os.ReadFile(filepath.Join(dir, id+".env"))
			seen[id] = strings.TrimSpace(string(b))
			return err == nil && strings.HasSuffix(string(b), "\n")
		})
		if want := "0 0.5 50 0=40960M " + mps; seen[id] != want {
			t.Errorf("job %s saw %q, want %q (GPU 0, half of it, MPS limits)", id, seen[id], want)
		}
		if d := cl.job(id); d.Resources.GPUMilli != 500 || d.Resources.GPUs != 0 || len(d.AttemptList) != 1 || len(d.AttemptList[0].GPUs) != 1 {
			t.Errorf("job %s: resources %+v, attempts %+v; want gpu_milli 500 on one GPU", id, d.Resources, d.AttemptList)
		}
	}

	third := strings.TrimSpace(mustCLI(t, "", "", "submit", "--server", cl.url, "--gpus", "0.5", "--", "sh", "-c", script))
	whole := strings.TrimSpace(mustCLI(t, "", "", "submit", "--server", cl.url, "--gpus", "1", "--", "true"))
	cl.eventually(30*time.Second, "the third half and the whole GPU waiting with reasons", func() bool {
		return strings.Contains(cl.job(third).Reason, "no GPU with 500 milli free") && cl.job(whole).Reason != ""
	})
	if d := cl.job(third); d.State != berth.JobPending || !strings.Contains(d.Reason, "the most free on one that fits is 0") {
		t.Errorf("third half: %s, reason %q", d.State, d.Reason)
	}
	if d := cl.job(whole); d.State != berth.JobPending {
		t.Errorf("whole-GPU job %s while the GPU is shared (reason %q)", d.State, d.Reason)
	}
	show := mustCLI(t, "", "", "job", "--server", cl.url, third)
	if !strings.Contains(show, "gpus=0.5 (a share of one GPU: 500 milli)") || !strings.Contains(show, "no GPU with 500 milli free") {
		t.Errorf("berth job of the third half:\n%s\nwant its share and why it waits", show)
	}
	show = mustCLI(t, "", "", "job", "--server", cl.url, first)
	if !strings.Contains(show, "0 (shared, 0.5)") {
		t.Errorf("berth job of the first half:\n%s\nwant its device shown shared", show)
	}

	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{first, second, third, whole} {
		if d := cl.awaitState(id, 60*time.Second, berth.JobSucceeded, berth.JobFailed); d.State != berth.JobSucceeded {
			t.Errorf("job %s ended %s: %s", id, d.State, d.Reason)
		}
	}
}
