package e2e

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/cloud/vast/vasttest"
)

// TestPoolRentsRunsAndGivesBack: a job asking for a 4090, which no
// worker has, makes the pool rent one instance at the marketplace; the
// instance's agent (started by its onstart) joins, the job runs on it and
// succeeds, and once the instance has been idle past the pool's idle
// timeout it is destroyed at the marketplace.
func TestPoolRentsRunsAndGivesBack(t *testing.T) {
	t.Parallel()
	fv := newFakeVast(t, vasttest.Options{Machines: 2})
	cl := newCluster(t, poolServerFlags...)
	cl.addPool(fv, "rent", "--max-instances", "2", "--max-price", "1.00/h", "--idle-timeout", "1s")

	job := cl.submitRenting(gpuJob("echo on-the-rented-gpu"))[0]
	d := cl.awaitState(job.ID, 90*time.Second, berth.JobSucceeded, berth.JobFailed)
	// Its agent may run the job before the last readiness probe is written.
	cl.awaitInstance("rent", 30*time.Second, "the instance ready", func(in *berth.Instance) bool { return !in.ReadyAt.IsZero() })
	ins := cl.instances("rent")
	if d.State != berth.JobSucceeded || len(ins) != 1 || d.AttemptList[0].Host != ins[0].WorkerHost {
		t.Fatalf("job %s: %s on %q; instances: %s\nwant it succeeded on the one instance rented", job.ID, d.State,
			d.AttemptList[0].Host, dump(ins))
	}
	if in := ins[0]; in.MachineID != vasttest.FirstMachine || in.ReadyAt.IsZero() {
		t.Errorf("instance %s: machine %d, ready at %v; want the cheapest machine, ready", in.ID, in.MachineID, in.ReadyAt)
	}
	up := cl.awaitEvent(10*time.Second, "pool.scale_up", func(e map[string]any) bool {
		return e["type"] == berth.EventPoolScaleUp && e["pool"] == "rent"
	})
	if !strings.Contains(up["reason"].(string), "4090") {
		t.Errorf("pool.scale_up reason %q: want the jobs' GPU named", up["reason"])
	}
	cl.awaitEvent(30*time.Second, "pool.scale_down", func(e map[string]any) bool {
		return e["type"] == berth.EventPoolScaleDown && e["pool"] == "rent" && e["instance"] == ins[0].ID
	})
	cl.eventually(30*time.Second, "the idle instance destroyed at the marketplace", func() bool {
		return len(fv.Live()) == 0 && cl.instances("rent")[0].Phase == berth.InstanceDestroyed
	})
	if n := len(fv.Instances()); n != 1 {
		t.Errorf("the marketplace made %d instances, want 1", n)
	}
}

// TestPoolProvisionFaultClasses provisions by hand (berth provision) from
// a marketplace whose cheapest machines are faulty, in price order: an
// unresolvable CDI device, a refused SSH key and no libcuda are each
// infra-fatal — destroyed, host quarantined, the next offer used (the
// refused key after exactly one SSH probe, its machine never created
// again); a machine whose agent never joins runs out of its warm-up
// budget and the provisioning fails. The next provisioning takes the
// healthy machine.
func TestPoolProvisionFaultClasses(t *testing.T) {
	t.Parallel()
	const cdi, sshKey, noLibcuda, stall, healthy = 1001, 1002, 1003, 1004, 1005
	fv := newFakeVast(t, vasttest.Options{Machines: 5, Faults: map[int64]vasttest.Fault{
		cdi: vasttest.FaultCDI, sshKey: vasttest.FaultSSHKey, noLibcuda: vasttest.FaultNoLibcuda, stall: vasttest.FaultStall}})
	cl := newCluster(t, append(poolServerFlags, "--pool-ready-budget", "2s")...)
	cl.addPool(fv, "faulty", "--max-instances", "5", "--max-price", "5/h")

	out, errOut, err := runCLI(t, "", "", "--server", cl.url, "provision", "--pool", "faulty")
	if exitCode(err) != 1 || !strings.Contains(errOut, "not ready") || !strings.Contains(errOut, berth.FailureWarmup) {
		t.Fatalf("berth provision (stall machine last): exit %d\nstdout: %s\nstderr: %s\nwant exit 1, not ready, warm-up", exitCode(err), out, errOut)
	}
	byMachine := map[int64]*berth.Instance{}
	for _, in := range cl.instances("faulty") {
		byMachine[in.MachineID] = in
	}
	for machine, class := range map[int64]string{cdi: berth.FailureInfraFatal, sshKey: berth.FailureInfraFatal,
		noLibcuda: berth.FailureInfraFatal, stall: berth.FailureWarmup} {
		in := byMachine[machine]
		if in == nil || in.Phase != berth.InstanceDestroyed || in.Failure != class {
			t.Errorf("machine %d: instance %s, want destroyed with failure %s", machine, dump(in), class)
		}
	}
	if len(byMachine) != 4 {
		t.Errorf("instances of machines %v, want the four faulty ones tried in price order", byMachine)
	}
	if in := byMachine[sshKey]; in != nil {
		probes := 0
		for _, p := range in.Probes {
			if strings.HasPrefix(p.Command, "ssh ") {
				probes++
			}
		}
		if probes != 1 || !strings.Contains(in.LastError, "unable to authenticate") {
			t.Errorf("ssh-key machine: %d SSH probes, last error %q; want one, the key refused:\n%s", probes, in.LastError, dump(in.Probes))
		}
	}

	var hosts []berth.HostRecord
	if err := json.Unmarshal([]byte(mustCLI(t, "", "", "--server", cl.url, "hosts", "list", "-o", "json")), &hosts); err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		quarantined := !h.QuarantinedUntil.IsZero()
		if want := h.MachineID == cdi || h.MachineID == sshKey || h.MachineID == noLibcuda; quarantined != want {
			t.Errorf("host %d: quarantined until %v; want quarantined %v", h.MachineID, h.QuarantinedUntil, want)
		}
	}
	if table := mustCLI(t, "", "", "--server", cl.url, "hosts", "list"); strings.Count(table, "quarantined") != 3 {
		t.Errorf("berth hosts list:\n%s\nwant three machines quarantined", table)
	}

	out = mustCLI(t, "", "", "--server", cl.url, "provision", "--pool", "faulty", "-o", "json")
	var ready berth.Instance
	if err := json.Unmarshal([]byte(out), &ready); err != nil || ready.Phase != berth.InstanceReady || ready.MachineID != healthy {
		t.Fatalf("berth provision again: %v\n%s\nwant machine %d ready", err, out, healthy)
	}
	for machine, want := range map[int64]int{cdi: 1, sshKey: 1, noLibcuda: 1, stall: 1, healthy: 1} {
		if n := fv.created(machine); n != want {
			t.Errorf("machine %d created %d times in the run, want %d", machine, n, want)
		}
	}
	if live := fv.Live(); len(live) != 1 || live[0].Machine != healthy {
		t.Errorf("live at the marketplace: %+v, want the healthy machine's instance alone", live)
	}
}

// TestPoolVanishedInstanceRequeuesItsJob: an instance that disappears
// from the marketplace while its job runs is recorded destroyed and its
// job is queued again without spending a retry (the job allows none),
// then runs to success on another instance.
func TestPoolVanishedInstanceRequeuesItsJob(t *testing.T) {
	t.Parallel()
	fv := newFakeVast(t, vasttest.Options{Machines: 2})
	cl := newCluster(t, poolServerFlags...)
	cl.addPool(fv, "spot", "--max-instances", "1", "--max-price", "1/h", "--idle-timeout", "10m")

	marker := filepath.Join(t.TempDir(), "first-attempt")
	req := gpuJob("if [ -e " + marker + " ]; then exit 0; fi; touch " + marker + "; exec sleep 300")
	req.Retries = 0
	job := cl.submitRenting(req)[0]
	cl.awaitState(job.ID, 90*time.Second, berth.JobRunning)
	first := cl.awaitInstance("spot", 30*time.Second, "the instance ready", func(in *berth.Instance) bool {
		return in.Phase == berth.InstanceReady
	})
	fv.Vanish(first.ProviderID)

	d := cl.awaitState(job.ID, 90*time.Second, berth.JobSucceeded, berth.JobFailed)
	if d.State != berth.JobSucceeded || len(d.AttemptList) != 2 || d.AttemptList[0].State != berth.AttemptLost ||
		d.AttemptList[0].Host != first.WorkerHost || d.AttemptList[1].Host == first.WorkerHost {
		t.Fatalf("job %s (retries 0): %s\nwant the first attempt lost on the vanished instance, the second succeeded on another", job.ID, dump(d))
	}
	ins := cl.instances("spot")
	if ins[0].Phase != berth.InstanceDestroyed || ins[0].Failure != berth.FailureInfraFatal || len(ins) != 2 {
		t.Errorf("instances: %s\nwant the vanished one destroyed (infra-fatal) and a second rented", dump(ins))
	}
}

// TestPoolCapsHoldUnderBurst: 100 waiting jobs want 100 instances; the
// pool rents one after another until a cap holds, and the marketplace
// never bills more than --max-instances instances nor more than
// --max-price an hour at once.
func TestPoolCapsHoldUnderBurst(t *testing.T) {
	t.Parallel()
	const maxInstances, maxPrice = 2, 0.70 // two instances cost 0.30 + 0.35; a third (0.40) would break both caps
	fv := newFakeVast(t, vasttest.Options{Machines: 6})
	cl := newCluster(t, poolServerFlags...)
	cl.addPool(fv, "burst", "--max-instances", "2", "--max-price", "0.70/h", "--idle-timeout", "10m")
	req := gpuJob("exec sleep 300")
	req.Array = 100
	cl.submitRenting(req)

	cl.awaitEvent(60*time.Second, "pool.capped", func(e map[string]any) bool {
		return e["type"] == berth.EventPoolCapped && e["pool"] == "burst"
	})
	cl.eventually(90*time.Second, "two instances ready", func() bool {
		n := 0
		for _, in := range cl.instances("burst") {
			if in.Phase == berth.InstanceReady {
				n++
			}
		}
		return n == maxInstances
	})
	// Watch the autoscaler's later looks (a tick is 100ms): the caps hold.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if n := len(fv.Live()); n > maxInstances {
			t.Fatalf("%d instances live at the marketplace, cap %d", n, maxInstances)
		}
	}
	live, perHour := fv.peak()
	if live != maxInstances || perHour > maxPrice+1e-9 || len(fv.Instances()) != maxInstances {
		t.Errorf("the marketplace billed at most %d instances at $%.2f/h at once, %d made; want %d, at most $%.2f/h, none made beyond",
			live, perHour, len(fv.Instances()), maxInstances, maxPrice)
	}
}

// TestPoolServerKilledMidProvisioning: the server is killed (SIGKILL)
// while the instance it rents for a waiting job is created but not yet
// running; restarted, it resumes that instance — no second create, none
// leaked — which becomes ready and runs the job.
func TestPoolServerKilledMidProvisioning(t *testing.T) {
	t.Parallel()
	fv := newFakeVast(t, vasttest.Options{Machines: 2, Stage: time.Second}) // running 3s after its create
	cl := newCluster(t, poolServerFlags...)
	cl.addPool(fv, "resume", "--max-instances", "2", "--max-price", "1/h", "--idle-timeout", "10m")
	job := cl.submitRenting(gpuJob("true"))[0]

	mid := cl.awaitInstance("resume", 30*time.Second, "an instance created, not yet running", func(in *berth.Instance) bool {
		return in.Phase == berth.InstanceCreated
	})
	cl.server.kill()
	cl.startServer()

	d := cl.awaitState(job.ID, 90*time.Second, berth.JobSucceeded, berth.JobFailed)
	cl.awaitInstance("resume", 30*time.Second, "the instance ready", func(in *berth.Instance) bool {
		return in.Phase == berth.InstanceReady || in.Phase == berth.InstanceDestroyed
	})
	ins := cl.instances("resume")
	if d.State != berth.JobSucceeded || len(ins) != 1 || ins[0].ID != mid.ID || ins[0].Phase != berth.InstanceReady ||
		d.AttemptList[0].Host != mid.WorkerHost {
		t.Fatalf("job %s: %s; instances: %s\nwant the job run on instance %s, resumed to ready", job.ID, d.State, dump(ins), mid.ID)
	}
	creates := 0
	for _, c := range fv.Calls() {
		if c.Endpoint == vasttest.EndpointCreate {
			creates++
		}
	}
	if live := fv.Live(); creates != 1 || len(live) != 1 || live[0].ID != mid.ProviderID {
		t.Errorf("%d creates, live %+v; want one create, its instance (%d) alone live", creates, live, mid.ProviderID)
	}
}

// TestPoolJobNotLostToAFailedMachine: the agent of a machine whose SSH
// key is refused still starts (its onstart runs) and joins; the job
// waiting for the pool must not be spent on it: it succeeds, though it
// allows no retry, on the next machine.
func TestPoolJobNotLostToAFailedMachine(t *testing.T) {
	t.Parallel()
	fv := newFakeVast(t, vasttest.Options{Machines: 2, Faults: map[int64]vasttest.Fault{vasttest.FirstMachine: vasttest.FaultSSHKey}})
	cl := newCluster(t, poolServerFlags...)
	cl.addPool(fv, "keys", "--max-instances", "1", "--max-price", "1/h", "--idle-timeout", "10m")
	req := gpuJob("exec sleep 2")
	req.Retries = 0
	job := cl.submitRenting(req)[0]
	d := cl.awaitState(job.ID, 90*time.Second, berth.JobSucceeded, berth.JobFailed)
	if d.State != berth.JobSucceeded {
		t.Fatalf("job %s (retries 0): %s\ninstances: %s", job.ID, dump(d), dump(cl.instances("keys")))
	}
}

// TestPoolVLLMNodeProvision: berth provision on a vLLM pool rents a bare
// vLLM node — its onstart runs vllm serve (the fake vLLM server on the
// machines' PATH) — and prints its timeline through the server's startup
// markers to ready, with the endpoint at which the model is served; berth
// instances lists it ready with that endpoint, berth pools shows the
// workload, and the node answers there; berth instance rm gives it back
// without blaming its machine.
func TestPoolVLLMNodeProvision(t *testing.T) {
	t.Parallel()
	fv := newFakeVast(t, vasttest.Options{Machines: 2}, vasttest.WithCommand("vllm", fakeVLLM(t)))
	cl := newCluster(t, poolServerFlags...)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	const model = "Qwen/Qwen2.5-0.5B-Instruct"
	cl.addPool(fv, "llm", "--max-instances", "1", "--max-price", "1/h", "--workload", "vllm", "--model", model, "--port", port)

	out, errOut, err := runCLI(t, "", "", "--server", cl.url, "provision", "--pool", "llm")
	endpoint := "127.0.0.1:" + port
	for _, want := range []string{"gpu_ok", "startup markers; last", "vllm serves " + model + " at http://" + endpoint,
		"Phase:     ready\n", "Endpoint:  " + endpoint + "\n"} {
		if exitCode(err) != 0 || !strings.Contains(out, want) {
			t.Fatalf("berth provision --pool llm: exit %d, lacks %q\nstdout: %s\nstderr: %s", exitCode(err), want, out, errOut)
		}
	}
	ins := cl.instances("llm")
	if len(ins) != 1 || ins[0].Phase != berth.InstanceReady || ins[0].Endpoint != endpoint || ins[0].WorkerHost != "" {
		t.Fatalf("instances: %s\nwant one ready at %s, with no worker", dump(ins), endpoint)
	}
	fields := func(out string) (rows [][]string) {
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			rows = append(rows, strings.Fields(l))
		}
		return rows
	}
	rows := fields(mustCLI(t, "", "", "--server", cl.url, "instances", "--pool", "llm"))
	if len(rows) != 2 || rows[0][8] != "ENDPOINT" || rows[1][4] != "ready" || rows[1][8] != endpoint {
		t.Errorf("berth instances: %q; want the node ready at %s", rows, endpoint)
	}
	if rows = fields(mustCLI(t, "", "", "--server", cl.url, "pools")); len(rows) != 2 || strings.Join(rows[1][:4], " ") != "llm vast vllm 1/0" {
		t.Errorf("berth pools: %q; want llm, a vllm pool with one instance ready", rows)
	}
	resp, err := http.Get("http://" + endpoint + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list.Data) != 1 || list.Data[0].ID != model {
		t.Errorf("GET %s/v1/models: %+v, %v; want %s served", endpoint, list, err, model)
	}

	// Nothing gives a node back but its operator: berth instance rm.
	if out := mustCLI(t, "", "", "--server", cl.url, "instance", "rm", ins[0].ID); out != "instance "+ins[0].ID+" destroyed\n" {
		t.Errorf("berth instance rm: %q", out)
	}
	if live := fv.Live(); len(live) != 0 {
		t.Errorf("live at the marketplace after berth instance rm: %+v", live)
	}
	var hosts []berth.HostRecord
	if err := json.Unmarshal([]byte(mustCLI(t, "", "", "--server", cl.url, "hosts", "list", "-o", "json")), &hosts); err != nil {
		t.Fatal(err)
	}
	if len(hosts) != 1 || hosts[0].Successes != 1 || len(hosts[0].Failures) != 0 || !hosts[0].QuarantinedUntil.IsZero() {
		t.Errorf("host records %+v, want the machine's success alone: giving a node back blames no one", hosts)
	}
}

// TestPoolInstanceVanishedWhileReadied: the cheapest machine's instance
// disappears from the marketplace as soon as it has been seen running,
// while it is still being readied. It is ended as vanished (destroyed,
// infra-fatal, its machine quarantined) within seconds, not when a
// phase's budget runs out; the next machine is rented; and the job,
// which allows no retry, succeeds there — an attempt its agent may have
// taken on the vanished machine is lost without spending a retry.
func TestPoolInstanceVanishedWhileReadied(t *testing.T) {
	t.Parallel()
	fv := newFakeVast(t, vasttest.Options{Machines: 2, Faults: map[int64]vasttest.Fault{vasttest.FirstMachine: vasttest.FaultVanish}})
	cl := newCluster(t, poolServerFlags...)
	cl.addPool(fv, "spot", "--max-instances", "1", "--max-price", "1/h", "--idle-timeout", "10m")
	req := gpuJob("exec sleep 1")
	req.Retries = 0
	job := cl.submitRenting(req)[0]

	d := cl.awaitState(job.ID, 90*time.Second, berth.JobSucceeded, berth.JobFailed)
	ins := cl.instances("spot")
	if len(ins) != 2 {
		t.Fatalf("instances: %s\nwant the vanished one and the next", dump(ins))
	}
	gone, next := ins[0], ins[1]
	if gone.MachineID != vasttest.FirstMachine || gone.Phase != berth.InstanceDestroyed || gone.Failure != berth.FailureInfraFatal ||
		!strings.Contains(gone.LastError, "vanished") {
		t.Errorf("first instance: %s\nwant it destroyed, infra-fatal, vanished", dump(gone))
	}
	if took := gone.EndedAt.Sub(gone.CreatedAt); took > 30*time.Second {
		t.Errorf("the vanished instance ended %v after its create, want within seconds (budgets are minutes)", took)
	}
	last := d.AttemptList[len(d.AttemptList)-1]
	if d.State != berth.JobSucceeded || next.MachineID != vasttest.FirstMachine+1 || last.Host != next.WorkerHost {
		t.Fatalf("job %s (retries 0): %s\nwant it succeeded on the next machine's instance %s", job.ID, dump(d), next.ID)
	}
	for _, a := range d.AttemptList[:len(d.AttemptList)-1] {
		if a.State != berth.AttemptLost || a.Host != gone.WorkerHost {
			t.Errorf("attempt %s on %s: %s, want only lost attempts on the vanished instance before the last", a.ID, a.Host, a.State)
		}
	}
	var hosts []berth.HostRecord
	if err := json.Unmarshal([]byte(mustCLI(t, "", "", "--server", cl.url, "hosts", "list", "-o", "json")), &hosts); err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		if h.MachineID == vasttest.FirstMachine && (h.Failures[berth.FailureInfraFatal] != 1 || h.QuarantinedUntil.IsZero()) {
			t.Errorf("host %d: %+v, want one infra-fatal failure, quarantined", h.MachineID, h)
		}
	}
}

// TestPoolAPIOutageBlamesNoHost: while a job runs on a rented instance,
// the marketplace's API answers 503, then drops its connections, for
// several of the server's comparisons of its instances with the listing.
// Nothing is taken for vanished: the instance stays ready, its job runs
// on to success in its one attempt, and its machine's record counts no
// failure.
func TestPoolAPIOutageBlamesNoHost(t *testing.T) {
	t.Parallel()
	fv := newFakeVast(t, vasttest.Options{Machines: 2})
	cl := newCluster(t, poolServerFlags...)
	cl.addPool(fv, "steady", "--max-instances", "1", "--max-price", "1/h", "--idle-timeout", "10m")
	done := filepath.Join(t.TempDir(), "done")
	req := gpuJob("while [ ! -e " + done + " ]; do sleep 0.1; done")
	req.Retries = 0
	job := cl.submitRenting(req)[0]
	cl.awaitState(job.ID, 90*time.Second, berth.JobRunning)
	inst := cl.awaitInstance("steady", 30*time.Second, "the instance ready", func(in *berth.Instance) bool {
		return in.Phase == berth.InstanceReady
	})

	for _, status := range []int{http.StatusServiceUnavailable, vasttest.OutageDrop} {
		fv.Outage(status)
		seen := fv.OutageCalls()
		// The server reconciles every 300ms: wait for several of its looks
		// to have met the outage.
		cl.eventually(30*time.Second, "the server's reconciliations meeting the outage", func() bool { return fv.OutageCalls() >= seen+4 })
	}
	fv.Outage(0)
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d := cl.awaitState(job.ID, 60*time.Second, berth.JobSucceeded, berth.JobFailed)
	if d.State != berth.JobSucceeded || len(d.AttemptList) != 1 || d.AttemptList[0].Host != inst.WorkerHost {
		t.Errorf("job %s: %s\nwant it succeeded in its one attempt on %s", job.ID, dump(d), inst.WorkerHost)
	}
	ins := cl.instances("steady")
	if len(ins) != 1 || ins[0].Phase != berth.InstanceReady || ins[0].Failure != "" || len(fv.Live()) != 1 {
		t.Errorf("instances: %s; live %+v\nwant the one instance ready, untouched", dump(ins), fv.Live())
	}
	var hosts []berth.HostRecord
	if err := json.Unmarshal([]byte(mustCLI(t, "", "", "--server", cl.url, "hosts", "list", "-o", "json")), &hosts); err != nil {
		t.Fatal(err)
	}
	if len(hosts) != 1 || hosts[0].Successes != 1 || len(hosts[0].Failures) != 0 || !hosts[0].QuarantinedUntil.IsZero() {
		t.Errorf("host records %+v, want the machine's success alone", hosts)
	}
}
