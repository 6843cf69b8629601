package provision

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/berth-dev/berth/cloud/vast/vasttest"
	"golang.org/x/crypto/ssh"
)

// testHost is a vasttest.Host whose machines are SSH servers on loopback
// (x/crypto/ssh, in process) that run each command with a real bash, a
// fake nvidia-smi and ldconfig first on PATH (the GPUs are the edge this
// test fakes). A machine's onstart "registers" its agent in reg (its env's
// BERTH_HOST), unless its fault is stall.
type testHost struct {
	t    *testing.T
	dir  string
	reg  *testRegistry
	key  ssh.Signer
	mu   sync.Mutex
	live map[int64]net.Listener
}

func newTestHost(t *testing.T, reg *testRegistry) *testHost {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	h := &testHost{t: t, dir: t.TempDir(), reg: reg, key: key, live: map[int64]net.Listener{}}
	t.Cleanup(func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, ln := range h.live {
			ln.Close()
		}
	})
	return h
}

const nvidiaSMI = "#!/bin/sh\necho 'NVIDIA GeForce RTX 4090, 550.54.15, 24564 MiB'\n"

func (h *testHost) Start(id, machine int64, fault vasttest.Fault, keys []string, env map[string]string, onstart string) (int, error) {
	bin := filepath.Join(h.dir, fmt.Sprint(id))
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return 0, err
	}
	ldconfig := "#!/bin/sh\necho '2 libs found in cache'\necho '\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1'\necho '\tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6'\n"
	if fault == vasttest.FaultNoLibcuda {
		ldconfig = "#!/bin/sh\necho '1 libs found in cache'\necho '\tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6'\n"
	}
	for name, body := range map[string]string{"nvidia-smi": nvidiaSMI, "ldconfig": ldconfig} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			return 0, err
		}
	}
	var authorized [][]byte
	if fault != vasttest.FaultSSHKey {
		for _, k := range keys {
			pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k))
			if err != nil {
				return 0, err
			}
			authorized = append(authorized, pk.Marshal())
		}
	}
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		for _, a := range authorized {
			if bytes.Equal(a, k.Marshal()) {
				return nil, nil
			}
		}
		return nil, errors.New("permission denied (publickey)")
	}}
	cfg.AddHostKey(h.key)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	h.mu.Lock()
	h.live[id] = ln
	h.mu.Unlock()
	go h.serve(ln, cfg, bin)
	if fault != vasttest.FaultStall && onstart != "" {
		h.reg.register(env["BERTH_HOST"])
	}
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (h *testHost) Stop(id int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ln := h.live[id]; ln != nil {
		ln.Close()
		delete(h.live, id)
	}
	return nil
}

// serve accepts SSH connections on ln until it is closed.
func (h *testHost) serve(ln net.Listener, cfg *ssh.ServerConfig, bin string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			_, chans, reqs, err := ssh.NewServerConn(c, cfg)
			if err != nil {
				c.Close()
				return
			}
			go ssh.DiscardRequests(reqs)
			for nc := range chans {
				if nc.ChannelType() != "session" {
					nc.Reject(ssh.UnknownChannelType, "sessions only")
					continue
				}
				ch, creqs, err := nc.Accept()
				if err != nil {
					continue
				}
				go session(ch, creqs, bin)
			}
		}()
	}
}

// session runs a session's exec request with bash.
func session(ch ssh.Channel, reqs <-chan *ssh.Request, bin string) {
	defer ch.Close()
	for r := range reqs {
		if r.Type != "exec" {
			r.Reply(false, nil)
			continue
		}
		var p struct{ Command string }
		if err := ssh.Unmarshal(r.Payload, &p); err != nil {
			r.Reply(false, nil)
			return
		}
		r.Reply(true, nil)
		cmd := exec.Command("bash", "-c", p.Command)
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
		cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
		code := 0
		if err := cmd.Run(); err != nil {
			code = 255
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			}
		}
		status := make([]byte, 4)
		binary.BigEndian.PutUint32(status, uint32(code))
		ch.SendRequest("exit-status", false, status)
		return
	}
}

// testRegistry is the server's side of registration: the hosts whose
// agent registered.
type testRegistry struct {
	mu    sync.Mutex
	hosts map[string]bool
}

func (r *testRegistry) register(host string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hosts == nil {
		r.hosts = map[string]bool{}
	}
	r.hosts[host] = true
}

// Registered reports whether host's agent registered.
func (r *testRegistry) Registered(host string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hosts[host]
}
