package e2e

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/cloud/vast/vasttest"
)

// poolServerFlags make a server's cloud pools quick: the autoscaler looks
// every 100ms at jobs waiting 10ms, phases check again every 100ms, and the
// live instances are reconciled with the marketplace every 300ms.
var poolServerFlags = []string{"--pool-tick", "100ms", "--pool-scale-after", "10ms", "--pool-poll", "100ms",
	"--pool-reconcile", "300ms"}

// pathOnce puts the berth under test on the PATH that instances' onstart
// (berth agent) runs with.
var pathOnce sync.Once

// fakeVast is the fake Vast marketplace, served from the test process,
// whose running instances are real machines: an sshd on loopback, a fake
// nvidia-smi and libcuda, and the onstart (berth agent) as a real process.
type fakeVast struct {
	*vasttest.Server
	t       *testing.T
	url     string // the API's base URL (--vast-url)
	keyFile string // a file holding the account's API key (--api-key-file)
}

// newFakeVast serves a fake marketplace with opts (Host set to real
// machines, with hostOpts) until the test ends; the test is skipped only when sshd is
// not installed. Start it before the cluster, so that the cluster's
// server is stopped before the machines are.
func newFakeVast(t *testing.T, opts vasttest.Options, hostOpts ...vasttest.SSHHostOption) *fakeVast {
	t.Helper()
	if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
		t.Skip("/usr/sbin/sshd is not installed (openssh-server): the fake marketplace's machines need it")
	}
	pathOnce.Do(func() { os.Setenv("PATH", filepath.Dir(berthBin)+string(os.PathListSeparator)+os.Getenv("PATH")) })
	host, err := vasttest.NewSSHHost(t.TempDir(), hostOpts...)
	if err != nil {
		t.Fatal(err)
	}
	opts.Host = host
	srv := vasttest.New(opts)
	hs := httptest.NewServer(srv)
	keyFile := filepath.Join(t.TempDir(), "vast_key")
	if err := os.WriteFile(keyFile, []byte(vasttest.DefaultAPIKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
		if err := host.Close(); err != nil {
			t.Errorf("stop the fake marketplace's machines: %v", err)
		}
	})
	return &fakeVast{Server: srv, t: t, url: hs.URL + vasttest.BasePath, keyFile: keyFile}
}

// price is what machine costs an hour at the fake (its offers' prices
// rise from the first machine).
func (fv *fakeVast) price(machine int64) float64 {
	return vasttest.DefaultBasePrice + vasttest.PriceStep*float64(machine-vasttest.FirstMachine)
}

// created returns how many creates the fake was sent for machine.
func (fv *fakeVast) created(machine int64) int {
	n := 0
	for _, in := range fv.Instances() {
		if in.Machine == machine {
			n++
		}
	}
	return n
}

// peak returns the most instances the fake had billed at once, and the
// most they cost an hour together, over its whole run.
func (fv *fakeVast) peak() (live int, perHour float64) {
	type change struct {
		at    time.Time
		delta int
		price float64
	}
	var changes []change
	for _, in := range fv.Instances() {
		p := fv.price(in.Machine)
		changes = append(changes, change{in.Created, 1, p})
		if !in.Live {
			changes = append(changes, change{in.Ended, -1, -p})
		}
	}
	slices.SortStableFunc(changes, func(a, b change) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // an end before a start at the same instant
	})
	n, cost := 0, 0.0
	for _, c := range changes {
		n, cost = n+c.delta, cost+c.price
		live, perHour = max(live, n), max(perHour, cost)
	}
	return live, perHour
}

// addPool adds pool name renting RTX 4090s from fv, with extra flags
// (--max-instances and --max-price among them).
func (cl *cluster) addPool(fv *fakeVast, name string, extra ...string) {
	cl.t.Helper()
	args := append([]string{"--server", cl.url, "pool", "add", name, "--api-key-file", fv.keyFile, "--vast-url", fv.url,
		"--gpu-type", vasttest.DefaultGPUName}, extra...)
	mustCLI(cl.t, "", "", args...)
}

// instances returns pool's instances, oldest first.
func (cl *cluster) instances(pool string) []*berth.Instance {
	cl.t.Helper()
	ins, err := cl.c.Instances(context.Background(), pool, false)
	if err != nil {
		cl.t.Fatalf("instances of %s: %v", pool, err)
	}
	return ins
}

// awaitInstance waits until one of pool's instances satisfies cond, and
// returns it.
func (cl *cluster) awaitInstance(pool string, timeout time.Duration, what string, cond func(*berth.Instance) bool) *berth.Instance {
	cl.t.Helper()
	var ins []*berth.Instance
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var err error
		if ins, err = cl.c.Instances(context.Background(), pool, false); err != nil {
			continue
		}
		for _, in := range ins {
			if cond(in) {
				return in
			}
		}
	}
	cl.t.Fatalf("timed out after %s waiting for %s; instances of %s:\n%s", timeout, what, pool, dump(ins))
	return nil
}

// submitRenting submits req once a pool can rent for it: a pool added
// counts for admission from the autoscaler's next look.
func (cl *cluster) submitRenting(req *berth.SubmitRequest) []*berth.Job {
	cl.t.Helper()
	var jobs []*berth.Job
	var err error
	cl.eventually(10*time.Second, "a pool that admits the job", func() bool {
		jobs, err = cl.c.Submit(context.Background(), req)
		return err == nil
	})
	return jobs
}

// gpuJob is a job running script on one 4090.
func gpuJob(script string) *berth.SubmitRequest {
	req := shellJob(script)
	req.Resources.GPUs, req.Resources.GPUType = 1, "4090"
	return req
}

// dump is v as indented JSON, for failure messages.
func dump(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}
