package provision

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/cloud"
	"golang.org/x/crypto/ssh"
)

// EchoProbe is the command run before every check over SSH: when it
// does not print echoMarker the channel is broken (the machine is not
// ready yet), which tells a broken channel from a check that failed.
const EchoProbe = "echo " + echoMarker

const echoMarker = "berth-probe-ok"

// DefaultGPUCheck is the GPU sanity check run over SSH: nvidia-smi must
// list the GPUs, and the dynamic linker's cache must name the CUDA driver
// library (libcuda.so.1). It runs under `set -euo pipefail`, so the first
// failing step fails it; grep reads ldconfig's whole output (no -q), so
// that an early exit cannot fail the pipe with SIGPIPE.
const DefaultGPUCheck = `set -euo pipefail
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
if ! ldconfig -p 2>/dev/null | grep 'libcuda\.so\.1' >/dev/null; then echo 'libcuda.so cannot found' >&2; exit 1; fi`

// MaxProbeOutput is how much of a probe's output an instance record
// keeps: the last MaxProbeOutput bytes.
const MaxProbeOutput = 4 << 10

// errHostKeyChanged is an SSH host key other than the one pinned for the
// instance at first sight.
var errHostKeyChanged = errors.New("ssh: the host key changed since first seen")

// hostKeyCallback accepts the host key of inst on first sight and pins
// it on inst (HostKey, which the caller writes to the store with the
// instance's next write, so that the pin outlives a restart), and
// refuses any other key for inst afterwards. It is called on the
// goroutine that drives inst.
func hostKeyCallback(inst *berth.Instance) ssh.HostKeyCallback {
	return func(_ string, _ net.Addr, key ssh.PublicKey) error {
		shown := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
		switch inst.HostKey {
		case "":
			inst.HostKey = shown
		case shown:
		default:
			return errHostKeyChanged
		}
		return nil
	}
}

// dial connects to inst's SSH server at addr and authenticates as
// p.SSHUser with p.Signer, within p.DialTimeout.
func (p *Provisioner) dial(ctx context.Context, inst *berth.Instance, addr string) (*ssh.Client, error) {
	d := net.Dialer{Timeout: p.DialTimeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(p.DialTimeout))
	cfg := &ssh.ClientConfig{
		User:            p.SSHUser,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(p.Signer)},
		HostKeyCallback: hostKeyCallback(inst),
		Timeout:         p.DialTimeout,
	}
	c, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	if err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return ssh.NewClient(c, chans, reqs), nil
}

// run runs cmd on client and returns its exit code and combined output;
// err is a broken channel (no exit code).
func run(ctx context.Context, client *ssh.Client, cmd string, timeout time.Duration) (int, string, error) {
	s, err := client.NewSession()
	if err != nil {
		return 0, "", err
	}
	defer s.Close()
	var out lockedBuffer
	s.Stdout, s.Stderr = &out, &out
	done := make(chan error, 1)
	go func() { done <- s.Run(cmd) }()
	var runErr error
	select {
	case runErr = <-done:
	case <-ctx.Done():
		return 0, out.String(), ctx.Err()
	case <-time.After(timeout):
		return 0, out.String(), fmt.Errorf("ssh: %q timed out after %v", firstLine(cmd), timeout)
	}
	var exit *ssh.ExitError
	switch {
	case runErr == nil:
		return 0, out.String(), nil
	case errors.As(runErr, &exit):
		return exit.ExitStatus(), out.String(), nil
	}
	return 0, out.String(), runErr
}

// lockedBuffer is a buffer that stdout and stderr, copied by goroutines
// of their own, may write at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// firstLine is the first line of s.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// classifySSH is the failure class of an SSH dial or channel error: a
// refused key or a changed host key blames the machine at once; anything
// else is a machine not reachable yet.
func classifySSH(err error) string {
	if errors.Is(err, errHostKeyChanged) {
		return berth.FailureInfraFatal
	}
	if c := cloud.Classify(cloud.WhereSSH, err.Error()); c != berth.FailureUnknown {
		return c
	}
	return berth.FailureWarmup
}

// cut keeps the last MaxProbeOutput bytes of s, valid UTF-8.
func cut(s string) string {
	if len(s) <= MaxProbeOutput {
		return s
	}
	return "…" + strings.ToValidUTF8(s[len(s)-MaxProbeOutput:], "")
}
