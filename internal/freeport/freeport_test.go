package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPortsAreFreeDistinctAndBelowTheEphemeralRange: each port can be
// listened on, none repeats, and each is below the ephemeral range where
// the kernel's range is known; a port already listened on is not given.
func TestPortsAreFreeDistinctAndBelowTheEphemeralRange(t *testing.T) {
	low, known := ephemeralLow()
	ports, err := Ports(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Errorf("port %d given twice in %v", p, ports)
		}
		seen[p] = true
		if known && (p >= low || p < 1024) {
			t.Errorf("port %d is not below the ephemeral range (from %d) and above 1023", p, low)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("port %d: %v", p, err)
			continue
		}
		defer l.Close() // held: the ports asked for next must not be these
	}
	more, err := Ports(20)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range more {
		if seen[p] {
			t.Errorf("port %d, listened on, was given again", p)
		}
	}
}
