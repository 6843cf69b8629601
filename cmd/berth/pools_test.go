package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/cloud/vast/vasttest"
	"github.com/berth-dev/berth/sqlite"
)

// seedPoolRecords writes instances and host records into the store of data
// directory dir, before a server starts on it.
func seedPoolRecords(t *testing.T, dir string, instances []*berth.Instance, hosts []*berth.HostRecord) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(dir, "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, in := range instances {
		if err := st.PutInstance(t.Context(), in); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range hosts {
		if err := st.PutHost(t.Context(), h); err != nil {
			t.Fatal(err)
		}
	}
}

// privateFile writes content (a key, a kubeconfig) to a file only its
// owner reads and returns its path.
func privateFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "private")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPoolAddListRm(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Now().UTC()
	seedPoolRecords(t, dir, []*berth.Instance{
		{ID: "i-ready", Pool: "rent", Phase: berth.InstanceReady, PricePerH: 0.45, CreatedAt: now},
		{ID: "i-boot", Pool: "rent", Phase: berth.InstanceRunning, PricePerH: 0.1, CreatedAt: now},
	}, nil)
	c := newCLIIn(t, dir)
	key := privateFile(t, "vast-secret-key\n")
	add := func(extra ...string) []string {
		return append([]string{"pool", "add", "rent", "--provider", "vast", "--api-key-file", key, "--gpu-type", "RTX 4090",
			"--gpus", "1", "--max-instances", "4", "--max-price", "0.60/h", "--idle-timeout", "10m"}, extra...)
	}

	// Bad input: one line naming the flag, nothing stored.
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{add("--gpus", "0"), "--gpus"},
		{add("--gpus", "17"), "--gpus"},
		{add("--max-instances", "0"), "--max-instances"},
		{add("--max-instances", "1001"), "--max-instances"},
		{add("--max-price", "cheap"), "--max-price"},
		{add("--max-price", "0/h"), "--max-price"},
		{add("--idle-timeout", "0s"), "--idle-timeout"},
		{add("--idle-timeout", "soon"), "--idle-timeout"},
		{add("--strictness", "lax"), "--strictness"},
		{add("--provider", "aws"), "--provider"},
		{add("--gpu-type", ""), "--gpu-type"},
		{add("--vast-url", "ftp://127.0.0.1/"), "--vast-url"},
		{add("--queues", "train,Bad Queue"), "--queues"},
		{add("--labels", "cloud"), "--labels"},
		{add("--workload", "triton"), "--workload"},
		{add("--workload", "vllm"), "--model"},
		{add("--model", "Qwen/Qwen2.5-0.5B-Instruct"), "--model"},
		{add("--workload", "vllm", "--model", "m", "--port", "22"), "--port"},
		{add("--workload", "vllm", "--model", "m", "--max-model-len", "-1"), "--max-model-len"},
		{add("--api-key-file", filepath.Join(dir, "none")), "--api-key-file"},
		{add("--api-key-file", privateFile(t, " \n")), "--api-key-file"},
		{[]string{"pool", "add", "rent", "--gpu-type", "RTX 4090", "--max-instances", "4", "--max-price", "0.60/h"}, "--api-key-file"},
		{[]string{"pool", "add", "Rent", "--api-key-file", key, "--gpu-type", "RTX 4090", "--max-instances", "4", "--max-price", "0.60/h"}, "NAME"},
	} {
		code, out, errOut := c.run(tc.args...)
		if code != exitUsage || out != "" || !strings.HasPrefix(errOut, "berth: "+tc.flag+": ") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("berth %s: exit %d, %q, %q; want 2 and one line naming %s", strings.Join(tc.args, " "), code, out, errOut, tc.flag)
		}
	}
	if list := listJSON[berth.PoolInfo](c, "pools", "-o", "json"); len(list) != 0 {
		t.Fatalf("pools after bad input: %+v", list)
	}

	code, out, errOut := c.run(add("--queues", "train,eval", "--labels", "cloud=vast")...)
	if code != 0 || out != "pool rent: vast 1× RTX 4090, up to 4 instances and 0.60/h, idle timeout 10m0s, balanced\n" {
		t.Fatalf("pool add: exit %d, %q, %q", code, out, errOut)
	}
	code, out, errOut = c.run("pools")
	rows := fields(out)
	if code != 0 || len(rows) != 2 || strings.Join(rows[0], " ") != "NAME PROVIDER WORKLOAD INSTANCES SPEND/h CAP" ||
		strings.Join(rows[1], " ") != "rent vast agent 1/1 $0.55 4×$0.60/h" {
		t.Errorf("berth pools: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = c.run("pools", "-o", "wide")
	if rows = fields(out); code != 0 || len(rows) != 2 || strings.Join(rows[1][6:], " ") != "1× RTX 4090 10m0s balanced train,eval -" {
		t.Errorf("berth pools -o wide: exit %d\n%s", code, out)
	}
	code, out, _ = c.run("pools", "-o", "json")
	if code != 0 || strings.Contains(out, "vast-secret-key") || !strings.Contains(out, `"api_key_set": true`) {
		t.Errorf("berth pools -o json: exit %d\n%s", code, out)
	}
	list := listJSON[berth.PoolInfo](c, "pools", "-o", "json")
	if len(list) != 1 || list[0].MaxPrice != 0.6 || list[0].Labels["cloud"] != "vast" || list[0].Ready != 1 || list[0].Starting != 1 {
		t.Errorf("pools -o json = %+v", list[0])
	}

	// A vLLM pool: its workload in the table, its model and port in the
	// wide one.
	code, out, errOut = c.run("pool", "add", "llm", "--api-key-file", key, "--gpu-type", "RTX 4090", "--max-instances", "1",
		"--max-price", "0.60/h", "--workload", "vllm", "--model", "Qwen/Qwen2.5-0.5B-Instruct", "--max-model-len", "4096")
	if code != 0 || !strings.HasSuffix(out, "  each instance a bare vLLM node: vllm serve Qwen/Qwen2.5-0.5B-Instruct on port 8000, max model len 4096\n") {
		t.Fatalf("pool add --workload vllm: exit %d, %q, %q", code, out, errOut)
	}
	code, out, _ = c.run("pools", "-o", "wide")
	if rows = fields(out); code != 0 || len(rows) != 3 || strings.Join(rows[1][:3], " ") != "llm vast vllm" ||
		rows[1][len(rows[1])-1] != "Qwen/Qwen2.5-0.5B-Instruct:8000" {
		t.Errorf("berth pools -o wide with a vllm pool: exit %d\n%s", code, out)
	}
	if code, out, errOut = c.run("pool", "rm", "llm"); code != 0 {
		t.Fatalf("pool rm llm: exit %d, %q, %q", code, out, errOut)
	}

	// A change without --api-key-file keeps the key.
	code, out, errOut = c.run("pool", "add", "rent", "--gpu-type", "RTX 4090", "--max-instances", "2", "--max-price", "$1.5/h")
	if code != 0 || !strings.Contains(out, "up to 2 instances and 1.50/h") {
		t.Errorf("pool add without a key: exit %d, %q, %q", code, out, errOut)
	}
	if list = listJSON[berth.PoolInfo](c, "pools", "-o", "json"); !list[0].APIKeySet {
		t.Error("the change dropped the key")
	}

	// rm is refused while instances live, unless --force.
	code, out, errOut = c.run("pool", "rm", "rent")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "2 live instances") || !strings.Contains(errOut, "(conflict)") {
		t.Errorf("pool rm with live instances: exit %d, %q, %q", code, out, errOut)
	}
	if code, out, errOut = c.run("pool", "rm", "rent", "--force"); code != 0 || out != "pool rent removed\n" {
		t.Errorf("pool rm --force: exit %d, %q, %q", code, out, errOut)
	}
	if list = listJSON[berth.PoolInfo](c, "pools", "-o", "json"); len(list) != 0 {
		t.Errorf("pools after rm: %+v", list)
	}
}

// hostKeySHA256 is the fingerprint of the host key of the test's
// instance, as ssh-keygen -l prints it (computed with ssh-keygen).
const hostKeySHA256 = "+DiY3wvvV6TuJJhbpZisF/zLDA0zPMSvHdkr4UvCOqU"

func TestInstancesAndHostsCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Now().UTC()
	created := now.Add(-2 * time.Hour)
	exit255, exit0 := 255, 0
	seedPoolRecords(t, dir, []*berth.Instance{
		{ID: "i-failed", Pool: "a", OfferID: 501, MachineID: 1001, Phase: berth.InstanceDestroyed, PricePerH: 0.5,
			Failure: berth.FailureInfraFatal, LastError: "Permission denied (publickey)", CreatedAt: created, EndedAt: created.Add(time.Hour),
			Timeline: []berth.PhaseChange{
				{Phase: berth.InstanceCreated, At: created.Add(time.Second), Reason: "contract 77"},
				{Phase: berth.InstanceRunning, At: created.Add(20 * time.Second)},
				{Phase: berth.InstanceDestroyed, At: created.Add(time.Hour), Reason: "infra-fatal: destroyed"},
			},
			Probes: []berth.Probe{
				{Phase: berth.InstanceSSH, Command: "ssh -p 40022 root@127.0.0.1 echo berth-probe", ExitCode: &exit255,
					Output: "root@127.0.0.1: Permission denied (publickey).", Class: berth.FailureInfraFatal, At: created.Add(30 * time.Second)},
			}},
		{ID: "i-ready", Pool: "b", OfferID: 502, MachineID: 1002, Phase: berth.InstanceReady, PricePerH: 0.25, CreatedAt: now.Add(-time.Hour),
			Endpoint: "127.0.0.1:41800",
			HostKey:  "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
			Probes: []berth.Probe{{Phase: berth.InstanceGPUChecked, Command: "set -euo pipefail\nnvidia-smi -L\n", ExitCode: &exit0,
				Output: "GPU 0: RTX 4090\n", At: now}}},
	}, []*berth.HostRecord{
		{Provider: "vast", MachineID: 1001, GPUName: "RTX 4090", Failures: map[string]int{berth.FailureInfraFatal: 1},
			LastSeen: now, LastFailure: "Permission denied (publickey)", QuarantinedUntil: now.Add(24 * time.Hour)},
		{Provider: "vast", MachineID: 1002, GPUName: "RTX 4090", Successes: 2, LastSeen: now},
	})
	c := newCLIIn(t, dir)

	code, out, errOut := c.run("instances")
	rows := fields(out)
	if code != 0 || len(rows) != 3 || strings.Join(rows[0], " ") != "ID POOL OFFER MACHINE PHASE AGE $/h SPENT ENDPOINT LAST-FAILURE" ||
		strings.Join(rows[1][:9], " ") != "i-failed a 501 1001 destroyed 2h 0.500 $0.50 -" || rows[1][9] != "infra_fatal:" ||
		strings.Join(rows[2], " ") != "i-ready b 502 1002 ready 1h 0.250 $0.25 127.0.0.1:41800 -" {
		t.Errorf("berth instances: exit %d\n%s%s", code, out, errOut)
	}
	if list := listJSON[berth.Instance](c, "instances", "--pool", "b", "-o", "json"); len(list) != 1 || list[0].ID != "i-ready" {
		t.Errorf("instances --pool b -o json = %+v", list)
	}
	if list := listJSON[berth.Instance](c, "instances", "--live", "-o", "json"); len(list) != 1 || list[0].ID != "i-ready" {
		t.Errorf("instances --live -o json = %+v", list)
	}

	code, out, errOut = c.run("instance", "i-failed")
	for _, want := range []string{
		"Phase:     destroyed\n", "Failure:   infra_fatal: Permission denied (publickey)\n", "machine 1001", "Timeline:\n",
		"+1s  created   contract 77\n",
		"+30s    probe ssh: ssh -p 40022 root@127.0.0.1 echo berth-probe (exit 255, infra_fatal)\n",
		"| root@127.0.0.1: Permission denied (publickey).\n",
		"+1h0m0s  destroyed infra-fatal: destroyed\n",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("berth instance i-failed: exit %d, lacks %q:\n%s%s", code, want, out, errOut)
		}
	}
	if strings.Index(out, "probe ssh") < strings.Index(out, "running") || strings.Index(out, "probe ssh") > strings.Index(out, "destroyed infra") {
		t.Errorf("the probe is not in time order among the phases:\n%s", out)
	}
	if in := runJSON[berth.Instance](c, "instance", "i-ready", "-o", "json"); in.Probes[0].Output != "GPU 0: RTX 4090\n" {
		t.Errorf("instance -o json = %+v", in)
	}
	// A command of several lines goes on indented under its first.
	code, out, errOut = c.run("instance", "i-ready")
	lines := strings.Split(out, "\n")
	i := slices.IndexFunc(lines, func(l string) bool {
		return strings.HasSuffix(l, "probe "+string(berth.InstanceGPUChecked)+": set -euo pipefail")
	})
	if code != 0 || i < 0 || i+2 >= len(lines) ||
		lines[i+1] != strings.Repeat(" ", strings.Index(lines[i], "set -euo"))+"nvidia-smi -L (exit 0, ok)" ||
		!strings.HasSuffix(lines[i+2], "| GPU 0: RTX 4090") ||
		!strings.Contains(out, "\nHost key:  SHA256:"+hostKeySHA256+" ssh-ed25519 (pinned)\n") {
		t.Errorf("berth instance i-ready: exit %d, want the probe's second command line under its first, then its output:\n%s%s", code, out, errOut)
	}
	if code, _, errOut = c.run("instance", "i-none"); code != exitUsage || !strings.Contains(errOut, "not_found") {
		t.Errorf("instance of an unknown id: exit %d, %q", code, errOut)
	}

	code, out, errOut = c.run("hosts", "list")
	rows = fields(out)
	if code != 0 || len(rows) != 3 || strings.Join(rows[0], " ") != "MACHINE GPU OK FAILURES LAST-SEEN STATE LAST-FAILURE" ||
		strings.Join(rows[1][:5], " ") != "1001 RTX 4090 0 infra_fatal=1" || !strings.HasPrefix(rows[1][6], "quarantined(2") ||
		strings.Join(rows[2][:5], " ") != "1002 RTX 4090 2 -" || strings.Join(rows[2][6:], " ") != "ok -" ||
		!strings.Contains(out, "\n1001     RTX 4090  0 ") {
		t.Errorf("berth hosts list: exit %d\n%s%s", code, out, errOut)
	}
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"hosts", "block"}, "MACHINE"},
		{[]string{"hosts", "block", "x1001"}, "MACHINE"},
		{[]string{"hosts", "block", "1001", "--provider", "aws"}, "provider"},
		{[]string{"hosts", "list", "extra"}, "args"},
	} {
		code, out, errOut := c.run(tc.args...)
		if code != exitUsage || out != "" || !strings.HasPrefix(errOut, "berth: "+tc.flag+": ") {
			t.Errorf("berth %s: exit %d, %q, %q; want 2 naming %s", strings.Join(tc.args, " "), code, out, errOut, tc.flag)
		}
	}
	if code, out, errOut = c.run("hosts", "block", "1002"); code != 0 || out != "machine 1002 blocked\n" {
		t.Errorf("hosts block: exit %d, %q, %q", code, out, errOut)
	}
	if code, out, errOut = c.run("hosts", "unblock", "1001"); code != 0 || out != "machine 1001 unblocked\n" {
		t.Errorf("hosts unblock: exit %d, %q, %q", code, out, errOut)
	}
	hosts := listJSON[berth.HostRecord](c, "hosts", "list", "-o", "json")
	if len(hosts) != 2 || hosts[0].Blocked || !hosts[0].QuarantinedUntil.IsZero() || hosts[0].Failures[berth.FailureInfraFatal] != 1 || !hosts[1].Blocked {
		t.Errorf("hosts after block and unblock: %+v", hosts)
	}
	if code, out, errOut = c.run("hosts", "clear"); code != 0 || out != "2 host records of vast cleared\n" {
		t.Errorf("hosts clear: exit %d, %q, %q", code, out, errOut)
	}
	if hosts = listJSON[berth.HostRecord](c, "hosts", "list", "-o", "json"); len(hosts) != 0 {
		t.Errorf("hosts after clear: %+v", hosts)
	}
}

// berth provision prints the instance's timeline and exits 0 when it is
// ready, 1 naming the failure class when not, 2 when the server could not
// provision.
func TestProvisionExitStatus(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	if code, out, errOut := c.run("provision"); code != exitUsage || out != "" || !strings.HasPrefix(errOut, "berth: --pool: ") {
		t.Errorf("provision without --pool: exit %d, %q, %q", code, out, errOut)
	}
	// A pool the server does not have.
	if code, _, errOut := c.run("provision", "--pool", "rent"); code != exitUsage || !strings.Contains(errOut, "no pool rent") {
		t.Errorf("provision of an unknown pool: exit %d, %q", code, errOut)
	}

	// The answers of a server that has one.
	created := time.Now().UTC().Add(-time.Minute)
	answers := map[string]*berth.Instance{
		"ok": {ID: "i-ok", Pool: "ok", Phase: berth.InstanceReady, CreatedAt: created, ReadyAt: created.Add(40 * time.Second),
			Timeline: []berth.PhaseChange{{Phase: berth.InstanceReady, At: created.Add(40 * time.Second), Reason: "agent registered"}}},
		"bad": {ID: "i-bad", Pool: "bad", Phase: berth.InstanceDestroyed, Failure: berth.FailureInfraFatal,
			LastError: "unresolvable CDI device", CreatedAt: created},
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in := answers[strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/api/v1/pools/"), "/provision")]
		if r.Method != http.MethodPost || in == nil {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(in)
	}))
	t.Cleanup(hs.Close)
	fake := &cli{t: t, url: hs.URL}
	code, out, errOut := fake.run("provision", "--pool", "ok")
	if code != 0 || !strings.Contains(out, "Phase:     ready\n") || !strings.Contains(out, "+40s  ready     agent registered\n") || errOut != "" {
		t.Errorf("provision of a ready instance: exit %d, %q, %q", code, out, errOut)
	}
	code, out, errOut = fake.run("provision", "--pool", "bad")
	if code != exitFailed || !strings.Contains(out, "Failure:   infra_fatal: unresolvable CDI device\n") ||
		errOut != "berth: instance i-bad not ready (destroyed): infra_fatal: unresolvable CDI device\n" {
		t.Errorf("provision of a failed instance: exit %d, %q, %q", code, out, errOut)
	}
	if code, out, _ = fake.run("provision", "--pool", "bad", "-o", "json"); code != exitFailed || !strings.Contains(out, `"failure": "infra_fatal"`) {
		t.Errorf("provision -o json of a failed instance: exit %d, %q", code, out)
	}
}

// berth provision prints each phase change and probe of the pool's
// instances as the provisioning makes them, not those there before.
func TestProvisionPrintsPhasesAsTheyHappen(t *testing.T) {
	t.Parallel()
	created := time.Now().UTC().Add(-time.Minute)
	at := func(s int) time.Time { return created.Add(time.Duration(s) * time.Second) }
	old := &berth.Instance{ID: "i-old", Pool: "rent", Phase: berth.InstanceReady, CreatedAt: created,
		Timeline: []berth.PhaseChange{{Phase: berth.InstanceReady, At: at(1), Reason: "an old one"}}}
	exit := 255
	steps := [][]*berth.Instance{
		{old},
		{old, {ID: "i-new", Pool: "rent", Phase: berth.InstanceCreated, CreatedAt: created, Timeline: []berth.PhaseChange{
			{Phase: berth.InstanceCreating, At: at(0), Reason: "offer 7"}, {Phase: berth.InstanceCreated, At: at(1), Reason: "contract 77"}}}},
		{old, {ID: "i-new", Pool: "rent", Phase: berth.InstanceRunning, CreatedAt: created, Timeline: []berth.PhaseChange{
			{Phase: berth.InstanceCreating, At: at(0), Reason: "offer 7"}, {Phase: berth.InstanceCreated, At: at(1), Reason: "contract 77"},
			{Phase: berth.InstanceRunning, At: at(20), Reason: "SSH at 127.0.0.1:40022"}},
			Probes: []berth.Probe{{Phase: berth.InstanceRunning, Command: "ssh root@127.0.0.1:40022", ExitCode: &exit,
				Output: "Connection refused", Class: berth.FailureWarmup, At: at(21)}}}},
	}
	var mu sync.Mutex
	reads := 0
	third := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/instances":
			mu.Lock()
			list := steps[min(reads, len(steps)-1)]
			if reads++; reads == len(steps)+1 { // the watcher printed the last step: it reads again
				close(third)
			}
			mu.Unlock()
			_ = json.NewEncoder(w).Encode(map[string]any{"instances": list})
		case r.Method == http.MethodPost && r.URL.Path == "/api/v1/pools/rent/provision":
			<-third // the provisioning takes until its progress was read and printed
			done := *steps[2][1]
			done.Phase = berth.InstanceReady
			_ = json.NewEncoder(w).Encode(done)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(hs.Close)
	code, out, errOut := (&cli{t: t, url: hs.URL}).run("provision", "--pool", "rent")
	progress, final, _ := strings.Cut(out, "ID:        i-new\n")
	want := "i-new       +0s  creating  offer 7\n" +
		"i-new       +1s  created   contract 77\n" +
		"i-new      +20s  running   SSH at 127.0.0.1:40022\n" +
		"i-new      +21s    probe running: ssh root@127.0.0.1:40022 (exit 255, warmup)\n" +
		"               | Connection refused\n"
	if code != 0 || progress != want || !strings.Contains(final, "Phase:     ready\n") || errOut != "" {
		t.Errorf("provision: exit %d, stdout %q, stderr %q; want the progress\n%s", code, out, errOut, want)
	}
}

// Ctrl-C on berth provision (the client gone) gives back the instance the
// server was provisioning: nothing stays billed at the fake marketplace.
func TestProvisionCancelGivesBackTheInstance(t *testing.T) {
	t.Parallel()
	market := vasttest.New(vasttest.Options{Stage: time.Hour}) // it never comes up
	ts := httptest.NewServer(market)
	t.Cleanup(ts.Close)
	t.Cleanup(market.Close)
	c := newCLI(t)
	if code, _, errOut := c.run("pool", "add", "rent", "--api-key-file", privateFile(t, vasttest.DefaultAPIKey), "--gpu-type", vasttest.DefaultGPUName,
		"--max-instances", "1", "--max-price", "5", "--vast-url", ts.URL+vasttest.BasePath); code != 0 {
		t.Fatalf("pool add: exit %d, %s", code, errOut)
	}
	ctx, cancel := context.WithCancel(t.Context())
	poll := time.NewTicker(10 * time.Millisecond) // polling the fake's books
	defer poll.Stop()
	go func() {
		defer cancel()
		for len(market.Live()) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-poll.C:
			}
		}
	}()
	if code, _, _ := c.runCtx(ctx, "provision", "--pool", "rent"); code == 0 {
		t.Fatal("a cancelled provision exited 0")
	}
	for deadline := time.After(30 * time.Second); len(market.Live()) != 0; {
		select {
		case <-deadline:
			t.Fatalf("still billed after the cancel: %+v", market.Live())
		case <-poll.C:
		}
	}
	var is []berth.Instance
	for deadline := time.After(30 * time.Second); len(is) != 1 || is[0].Phase != berth.InstanceDestroyed; {
		is = listJSON[berth.Instance](c, "instances", "--pool", "rent", "-o", "json")
		select {
		case <-deadline:
			t.Fatalf("instances %+v, want one destroyed", is)
		case <-poll.C:
		}
	}
	if is[0].Failure != "" || !strings.Contains(is[0].Timeline[len(is[0].Timeline)-1].Reason, "cancelled") {
		t.Errorf("instance %+v, want destroyed as cancelled, with no failure class", is[0])
	}
}
