package agent

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// TestAgentRefusesRankZeroWhosePortIsBusy: rank 0 of a gang whose
// MASTER_PORT another process listens on is not started and ends with
// cause port_busy; once the port is free, the same assignment starts.
func TestAgentRefusesRankZeroWhosePortIsBusy(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	startAgent(t, fs, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ran := filepath.Join(t.TempDir(), "ran")
	touch := []string{"touch", ran}
	fs.send(wire.TypeJobAssign, &wire.JobAssign{AttemptID: "r0", JobID: "j", Command: touch, RendezvousPort: port})
	checkResult(t, fs.result("r0"), berth.AttemptFailed, berth.CausePortBusy, intp(83),
		fmt.Sprintf("not started: MASTER_PORT %d is in use on this machine", port))
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("rank 0 ran although its port was busy")
	}
	ln.Close()
	fs.assign(&wire.JobAssign{AttemptID: "r0b", JobID: "j", Command: touch, RendezvousPort: port})
	checkResult(t, fs.result("r0b"), berth.AttemptSucceeded, "", intp(0), "")
	if _, err := os.Stat(ran); err != nil {
		t.Fatalf("rank 0 with a free port did not run: %v", err)
	}
}

// TestAgentAdvertisesAnAddress: by default the agent advertises the local
// address of its connection to the server (127.0.0.1 here); --advertise
// replaces it; a bad address is refused by New, naming the field.
func TestAgentAdvertisesAnAddress(t *testing.T) {
	t.Parallel()
	registered := func(fs *fakeServer) *wire.Register {
		t.Helper()
		return fs.await("register", func(m wire.Message) bool {
			_, ok := m.Body.(*wire.Register)
			return ok
		}).Body.(*wire.Register)
	}
	fs := newFakeServer(t)
	startAgent(t, fs, nil)
	if got := registered(fs).Advertise; got != "127.0.0.1" {
		t.Errorf("advertised %q by default, want 127.0.0.1, the address the agent reaches the server from", got)
	}
	fs = newFakeServer(t)
	startAgent(t, fs, func(c *Config) { c.Advertise = "gpu-7.example.com" })
	if got := registered(fs).Advertise; got != "gpu-7.example.com" {
		t.Errorf("advertised %q, want gpu-7.example.com", got)
	}
	_, err := New(Config{Server: "http://127.0.0.1:1", DataDir: t.TempDir(), Host: "box", Advertise: "http://gpu-7:80"})
	if err == nil || !strings.Contains(err.Error(), "advertise") {
		t.Fatalf("New with advertise http://gpu-7:80: %v, want an error naming advertise", err)
	}
}
