package vasttest_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/cloud/vast/vasttest"
)

// libcudaProbe is the GPU sanity probe SSHHost documents.
const libcudaProbe = `nvidia-smi -L && ldconfig -p | grep -q 'libcuda\.so\.1'`

// needSSHD skips t where OpenSSH's server is not installed.
func needSSHD(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(vasttest.SSHD); err != nil {
		t.Skipf("needs OpenSSH's sshd at %s (apt-get install openssh-server; .ci/run installs it): %v", vasttest.SSHD, err)
	}
}

// newHost returns an SSHHost under a temporary directory, closed (and
// checked for leaked processes) when t ends.
func newHost(t *testing.T, opts ...vasttest.SSHHostOption) *vasttest.SSHHost {
	t.Helper()
	h, err := vasttest.NewSSHHost(t.TempDir(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Error(err)
		}
		if pids, err := h.Alive(); err != nil || len(pids) > 0 {
			t.Errorf("after Close: processes %v left (%v)", pids, err)
		}
	})
	return h
}

// clientKey makes an SSH key pair and returns the private key's path and
// the public key's authorized_keys line.
func clientKey(t *testing.T) (string, string) {
	t.Helper()
	key := filepath.Join(t.TempDir(), "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return key, strings.TrimSpace(string(pub))
}

// runSSH runs command on 127.0.0.1:port with OpenSSH's client and key,
// returning its stdout, stderr and error.
func runSSH(t *testing.T, key string, port int, command string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ssh", "-F", "/dev/null", "-i", key, "-p", strconv.Itoa(port),
		"-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no",
		"-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR",
		"127.0.0.1", command)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// holdSSH opens an SSH session on 127.0.0.1:port that runs until it is
// killed, and returns the pid of its command on the machine and a channel
// that has the client's exit.
func holdSSH(t *testing.T, key string, port int) (int, <-chan error) {
	t.Helper()
	cmd := exec.Command("ssh", "-F", "/dev/null", "-i", key, "-p", strconv.Itoa(port),
		"-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no",
		"-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR",
		"127.0.0.1", "echo $$; exec sleep 600")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		t.Fatalf("held SSH session printed %q (%v, %v)", line, err, perr)
	}
	end := make(chan error, 1)
	go func() { end <- cmd.Wait() }()
	return pid, end
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// refuses reports whether nothing accepts connections on the loopback port.
func refuses(port int) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 5*time.Second)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// readFIFO makes a FIFO and returns its path and a function that returns
// the first line written to it, failing t after 30 seconds.
func readFIFO(t *testing.T) (string, func() string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, func() string {
		t.Helper()
		got := make(chan string, 1)
		go func() {
			b, _ := os.ReadFile(path) // blocks until a writer opens and closes it
			got <- strings.TrimSpace(string(b))
		}()
		select {
		case s := <-got:
			return s
		case <-time.After(30 * time.Second):
			t.Fatal("nothing written to the FIFO in 30s")
			return ""
		}
	}
}

// TestSSHHostAnswersSSHWithTheMachinesGPUs checks that a started machine
// takes a real SSH connection with the account's key, that its nvidia-smi
// lists the machine's GPUs (in the agent's query format too), and that the
// documented libcuda probe passes.
func TestSSHHostAnswersSSHWithTheMachinesGPUs(t *testing.T) {
	needSSHD(t)
	a100 := vasttest.HostGPUs{Name: "NVIDIA A100-SXM4-80GB", Count: 2, MemoryMiB: 81920, Driver: "570.86.10", CUDA: "12.8"}
	dir := t.TempDir()
	h, err := vasttest.NewSSHHost(dir, vasttest.WithGPUs(func(machine int64) vasttest.HostGPUs {
		if machine != 1001 {
			t.Errorf("GPUs asked for machine %d, want 1001", machine)
		}
		return a100
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	key, pub := clientKey(t)
	port, err := h.Start(7, 1001, vasttest.FaultNone, []string{pub}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	out, stderr, err := runSSH(t, key, port, "nvidia-smi -L")
	if err != nil {
		t.Fatalf("ssh nvidia-smi -L: %v: %s", err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-") || !strings.HasPrefix(lines[1], "GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-") {
		t.Errorf("nvidia-smi -L printed %q", out)
	}
	if _, stderr, err := runSSH(t, key, port, libcudaProbe); err != nil {
		t.Errorf("libcuda probe failed on a healthy machine: %v: %s", err, stderr)
	}
	if out, stderr, err := runSSH(t, key, port, "nvidia-smi"); err != nil || !strings.Contains(out, "Driver Version: 570.86.10") {
		t.Errorf("nvidia-smi printed %q (%v: %s)", out, err, stderr)
	}
	gpus, err := agent.DiscoverGPUs(context.Background(), filepath.Join(dir, "7", "bin", "nvidia-smi"))
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 2 || gpus[1].Index != 1 || gpus[1].Model != a100.Name || gpus[1].Memory != 80<<30 || gpus[0].UUID == gpus[1].UUID {
		t.Errorf("the agent discovers %+v", gpus)
	}
	if _, err := h.Start(7, 1001, vasttest.FaultNone, []string{pub}, nil, ""); err == nil {
		t.Error("a second Start of instance 7 succeeded")
	}
	if err := h.Stop(99); err != nil {
		t.Errorf("Stop of an unknown instance: %v", err)
	}
	if err := h.Stop(7); err != nil {
		t.Fatal(err)
	}
	if port, err = h.Start(7, 1001, vasttest.FaultNone, []string{pub}, nil, ""); err != nil {
		t.Fatalf("Start after Stop: %v", err)
	}
	if _, stderr, err := runSSH(t, key, port, "true"); err != nil {
		t.Errorf("ssh after a restart: %v: %s", err, stderr)
	}
}

// TestSSHHostKeyFaultDeniesTheKey checks that a machine with the ssh-key
// fault answers SSH but refuses the account's key, as a real host does.
func TestSSHHostKeyFaultDeniesTheKey(t *testing.T) {
	needSSHD(t)
	h := newHost(t)
	key, pub := clientKey(t)
	port, err := h.Start(8, 1002, vasttest.FaultSSHKey, []string{pub}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	out, stderr, err := runSSH(t, key, port, "echo in")
	if err == nil || out != "" || !strings.Contains(stderr, "Permission denied (publickey)") {
		t.Errorf("ssh with an uninstalled key: err %v, stdout %q, stderr %q", err, out, stderr)
	}
}

// TestSSHHostNoLibcudaFailsTheProbe checks that the no-libcuda fault fails
// the documented libcuda probe while nvidia-smi still answers.
func TestSSHHostNoLibcudaFailsTheProbe(t *testing.T) {
	needSSHD(t)
	h := newHost(t)
	key, pub := clientKey(t)
	port, err := h.Start(9, 1003, vasttest.FaultNoLibcuda, []string{pub}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if out, stderr, err := runSSH(t, key, port, "nvidia-smi -L"); err != nil || !strings.HasPrefix(out, "GPU 0: ") {
		t.Errorf("nvidia-smi -L without libcuda: %q (%v: %s)", out, err, stderr)
	}
	_, stderr, err := runSSH(t, key, port, libcudaProbe)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("libcuda probe without libcuda: %v (want exit status 1): %s", err, stderr)
	}
}

// TestSSHHostStopKillsEverything checks that onstart runs as a real process
// with the request's environment and the machine's nvidia-smi, and that
// Stop kills it, what it left running, a process started over SSH, and
// sshd.
func TestSSHHostStopKillsEverything(t *testing.T) {
	needSSHD(t)
	h := newHost(t)
	key, pub := clientKey(t)
	fifo, read := readFIFO(t)
	onstart := `sleep 600 & echo "$! $GREETING $(nvidia-smi -L | cut -d: -f1)" > ` + fifo
	env := map[string]string{"GREETING": "hello", "-p 8000:8000": "1"}
	port, err := h.Start(10, 1004, vasttest.FaultNone, []string{pub}, env, onstart)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(read())
	if len(f) != 4 || f[1] != "hello" || f[2] != "GPU" || f[3] != "0" {
		t.Fatalf("onstart wrote %q, want its child's pid, hello, GPU 0", f)
	}
	orphan, err := strconv.Atoi(f[0])
	if err != nil || !alive(orphan) {
		t.Fatalf("onstart's child %q is not alive (%v)", f[0], err)
	}
	out, stderr, err := runSSH(t, key, port, "nohup sleep 600 >/dev/null 2>&1 & echo $!")
	if err != nil {
		t.Fatalf("ssh: %v: %s", err, stderr)
	}
	session, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || !alive(session) {
		t.Fatalf("the process started over SSH %q is not alive (%v)", out, err)
	}
	held, heldEnd := holdSSH(t, key, port)
	// A connection that never authenticates: sshd's process for it waits
	// for the client (LoginGraceTime, 2 minutes) unless Stop kills it.
	raw, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	rawIn := bufio.NewReader(raw)
	if banner, err := rawIn.ReadString('\n'); err != nil || !strings.HasPrefix(banner, "SSH-2.0-") {
		t.Fatalf("sshd's banner: %q (%v)", banner, err)
	}
	pids, err := h.Alive()
	if err != nil || len(pids) < 3 { // sshd, onstart's child, the session's child
		t.Fatalf("Alive: %v (%v), want sshd and two sleeps at least", pids, err)
	}
	if err := h.Stop(10); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-heldEnd:
		if err == nil {
			t.Error("an open SSH session ended well across Stop")
		}
	case <-time.After(30 * time.Second):
		t.Error("an open SSH session outlived Stop by 30s")
	}
	_ = raw.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := rawIn.ReadByte(); err == nil || os.IsTimeout(err) {
		t.Errorf("an unauthenticated connection outlived Stop: %v", err)
	}
	for _, pid := range append(pids, orphan, session, held) {
		if alive(pid) {
			st, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			t.Errorf("process %d outlived Stop: %s", pid, st)
		}
	}
	if !refuses(port) {
		t.Errorf("port %d still takes connections after Stop", port)
	}
	if pids, err := h.Alive(); err != nil || len(pids) > 0 {
		t.Errorf("after Stop: processes %v left (%v)", pids, err)
	}
}

// TestSSHHostStallNeverRunsOnstart checks that a stalled machine answers
// SSH and looks healthy but never runs its onstart.
func TestSSHHostStallNeverRunsOnstart(t *testing.T) {
	needSSHD(t)
	dir := t.TempDir()
	h, err := vasttest.NewSSHHost(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	key, pub := clientKey(t)
	port, err := h.Start(11, 1005, vasttest.FaultStall, []string{pub}, nil, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := runSSH(t, key, port, libcudaProbe); err != nil {
		t.Errorf("a stalled machine fails the GPU probe: %v: %s", err, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "11", "onstart.log")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a stalled machine ran its onstart (onstart.log: %v)", err)
	}
	pids, err := h.Alive()
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		if err == nil && string(comm) != "sshd\n" { // an error: it has exited since
			t.Errorf("a stalled machine runs %q (process %d), want sshd alone", comm, pid)
		}
	}
}

// TestSSHHostTwoHostsAtOnce checks that two hosts run machines side by side
// on their own ports, and that stopping one leaves the other up.
func TestSSHHostTwoHostsAtOnce(t *testing.T) {
	needSSHD(t)
	gpus := func(name string) vasttest.SSHHostOption {
		return vasttest.WithGPUs(func(int64) vasttest.HostGPUs {
			g := vasttest.DefaultGPUs
			g.Name = name
			return g
		})
	}
	a, b := newHost(t, gpus("NVIDIA L4")), newHost(t, gpus("NVIDIA H100 80GB HBM3"))
	key, pub := clientKey(t)
	pa, err := a.Start(1, 1001, vasttest.FaultNone, []string{pub}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	pb, err := b.Start(1, 1001, vasttest.FaultNone, []string{pub}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if pa == pb {
		t.Fatalf("both hosts listen on port %d", pa)
	}
	for _, c := range []struct {
		port int
		name string
	}{{pa, "NVIDIA L4"}, {pb, "NVIDIA H100 80GB HBM3"}} {
		if out, stderr, err := runSSH(t, key, c.port, "nvidia-smi -L"); err != nil || !strings.HasPrefix(out, "GPU 0: "+c.name+" (") {
			t.Errorf("port %d: nvidia-smi -L printed %q (%v: %s), want %s", c.port, out, err, stderr, c.name)
		}
	}
	if err := a.Stop(1); err != nil {
		t.Fatal(err)
	}
	if !refuses(pa) {
		t.Errorf("port %d still takes connections after Stop", pa)
	}
	if _, stderr, err := runSSH(t, key, pb, "true"); err != nil {
		t.Errorf("the other host's machine went down with it: %v: %s", err, stderr)
	}
}

// TestSSHHostCommandsHomeAndOOM checks that a command given WithCommand
// is on the machine's PATH for its onstart, that the onstart and an SSH
// session share the machine's HOME, and that an oom machine's onstart has
// FAKEVLLM_OOM set.
func TestSSHHostCommandsHomeAndOOM(t *testing.T) {
	needSSHD(t)
	hello := filepath.Join(t.TempDir(), "hello")
	if err := os.WriteFile(hello, []byte("#!/bin/sh\necho \"hello ${FAKEVLLM_OOM:-none}\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := newHost(t, vasttest.WithCommand("hello", hello))
	key, pub := clientKey(t)
	for i, tc := range []struct {
		fault vasttest.Fault
		want  string
	}{{vasttest.FaultNone, "hello none"}, {vasttest.FaultOOM, "hello 1"}} {
		fifo, read := readFIFO(t)
		port, err := h.Start(int64(20+i), 1001, tc.fault, []string{pub}, nil, `hello > "$HOME/said" && echo "$HOME" > `+fifo)
		if err != nil {
			t.Fatal(err)
		}
		home := read()
		out, stderr, err := runSSH(t, key, port, `echo "$HOME"; cat "$HOME/said"`)
		if err != nil || out != home+"\n"+tc.want+"\n" {
			t.Errorf("%s machine: onstart's HOME %q; over SSH %q (%v: %s), want the same HOME and %q", tc.fault, home, out, err, stderr, tc.want)
		}
	}
}
