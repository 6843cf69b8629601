package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
)

// torchPython returns a Python that imports torch: python3 on PATH, else
// Debian's /usr/bin/python3 (python3-torch). Without one the test fails:
// CI installs python3-torch (.ci/run).
func torchPython(t *testing.T) string {
	t.Helper()
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		if path, err := exec.LookPath(py); err == nil && exec.Command(path, "-c", "import torch").Run() == nil {
			return path
		}
	}
	t.Fatal("no python3 here imports torch: install PyTorch (Debian: apt-get install python3-torch), as .ci/run does")
	return ""
}

// torchGangScript joins the gang with torch.distributed over gloo from the
// environment Berth gives (env://: MASTER_ADDR, MASTER_PORT, RANK,
// WORLD_SIZE) and all-reduces each rank's rank+1. With "fail" as its
// argument, rank 1 then exits 1 while rank 0 sleeps before its natural end.
const torchGangScript = `import datetime, sys, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=120))
rank, size = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print(f"rank {rank} of {size}: all_reduce {t.item():g}", flush=True)
if sys.argv[1:] == ["fail"]:
    if rank == 1:
        sys.exit(1)
    time.sleep(600)
    print("rank 0 reached its natural end", flush=True)
dist.destroy_process_group()
`

// TestTorchGangOverGloo runs real PyTorch in 2-node gangs on two agents
// whose host labels (vm-1, vm-2) do not resolve, as under berth up: the
// ranks meet at rank 0's advertised address and all-reduce; and when rank
// 1 exits 1 after joining, rank 0 is killed and the job fails.
func TestTorchGangOverGloo(t *testing.T) {
	t.Parallel()
	py := torchPython(t)
	script := filepath.Join(t.TempDir(), "gang.py")
	if err := os.WriteFile(script, []byte(torchGangScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cl := newCluster(t)
	cl.addAgent("vm-1")
	cl.addAgent("vm-2")
	gang := func(args ...string) *berth.Job {
		req := &berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
		req.Command = append(berth.Argv{py, script}, args...)
		req.Nodes = 2
		req.MaxRuntime = berth.Duration(4 * time.Minute) // nothing outlives a hung rendezvous
		return cl.submit(req)[0]
	}
	logs := func(id string) string {
		var out bytes.Buffer
		if err := cl.c.Logs(context.Background(), id, client.LogOptions{}, &out); err != nil {
			t.Fatalf("logs of %s: %v", id, err)
		}
		return out.String()
	}

	j := gang()
	d := cl.awaitState(j.ID, 3*time.Minute, berth.JobSucceeded, berth.JobFailed)
	out := logs(j.ID)
	if d.State != berth.JobSucceeded {
		t.Fatalf("torch gang: %s (%q), want succeeded; output:\n%s", d.State, d.Reason, out)
	}
	for _, want := range []string{"rank 0 of 2: all_reduce 3", "rank 1 of 2: all_reduce 3"} {
		if !strings.Contains(out, want) {
			t.Errorf("torch gang output lacks %q:\n%s", want, out)
		}
	}
	hosts := map[string]bool{}
	for _, a := range d.AttemptList {
		hosts[a.Host] = true
	}
	if !hosts["vm-1"] || !hosts["vm-2"] {
		t.Errorf("torch gang ran on %v, want vm-1 and vm-2", hosts)
	}

	j = gang("fail")
	d = cl.awaitState(j.ID, 3*time.Minute, berth.JobSucceeded, berth.JobFailed)
	out = logs(j.ID)
	if d.State != berth.JobFailed || d.ExitCode == nil || *d.ExitCode != 1 {
		t.Fatalf("torch gang whose rank 1 exits 1: %s exit %v (%q), want failed with 1; output:\n%s", d.State, d.ExitCode, d.Reason, out)
	}
	states := map[int]berth.AttemptState{}
	for _, a := range d.AttemptList {
		states[a.TaskIndex] = a.State
	}
	if len(d.AttemptList) != 2 || states[0] != berth.AttemptCancelled || states[1] != berth.AttemptFailed {
		t.Fatalf("attempts %v, want one each: rank 0 cancelled (killed by the gang), rank 1 failed", states)
	}
	if !strings.Contains(out, "rank 0 of 2: all_reduce 3") || strings.Contains(out, "natural end") {
		t.Fatalf("rank 0 should have joined, all-reduced and been killed before its natural end; output:\n%s", out)
	}
}

// TestEndpointIsReachableAtTheAdvertisedAddress runs a service on an agent
// that advertises 127.0.0.2 (another loopback address, not its host label
// and not the address it reaches the server from): the worker, its
// endpoint and berth endpoints carry that address, and the endpoint's URL
// answers. An address with a port is refused at the flag.
func TestEndpointIsReachableAtTheAdvertisedAddress(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, "--templates", fakeLLMTemplate(t))
	cl.addAgent("vm-7", "--ports", "18300-18399", "--advertise", "127.0.0.2")
	ws, err := cl.c.Workers(context.Background())
	if err != nil || len(ws) != 1 || ws[0].Advertise != "127.0.0.2" {
		t.Fatalf("workers = %+v, %v; want vm-7 advertising 127.0.0.2", ws, err)
	}
	id := serveFake(cl, "chat", "org/chat-7b", "--warmup 100ms --host 0.0.0.0")
	var eps []*berth.Endpoint
	cl.eventually(30*time.Second, "the service's endpoint", func() bool {
		eps, err = cl.c.Endpoints(context.Background())
		return err == nil && len(eps) == 1
	})
	e := eps[0]
	if e.JobID != id || e.Host != "vm-7" || e.Address != "127.0.0.2" || !strings.HasPrefix(e.URL, "http://127.0.0.2:") {
		t.Fatalf("endpoint %+v, want job %s on vm-7 at http://127.0.0.2:PORT", e, id)
	}
	resp, err := http.Get(e.URL + "/v1/models")
	if err != nil {
		t.Fatalf("GET the endpoint's URL: %v", err)
	}
	var models struct{ Data []struct{ ID string } }
	err = json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if err != nil || len(models.Data) != 1 || models.Data[0].ID != "org/chat-7b" {
		t.Fatalf("GET %s/v1/models: %+v, %v", e.URL, models, err)
	}
	if out := mustCLI(t, "", "", "endpoints", "--server", cl.url); !strings.Contains(out, e.URL) {
		t.Errorf("berth endpoints does not print %s:\n%s", e.URL, out)
	}
	if out := mustCLI(t, "", "", "workers", "--server", cl.url); !strings.Contains(out, "127.0.0.2") {
		t.Errorf("berth workers does not show the advertised address:\n%s", out)
	}
	_, errOut, err := runCLI(t, "", "", "agent", "--server", cl.url, "--host", "vm-8", "--gpus", "0",
		"--data-dir", t.TempDir(), "--advertise", "127.0.0.2:9000")
	if err == nil || !strings.Contains(errOut, "--advertise") {
		t.Fatalf("berth agent --advertise 127.0.0.2:9000: %v, stderr %q; want it refused naming --advertise", err, errOut)
	}
}
