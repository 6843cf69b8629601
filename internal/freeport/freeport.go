// Package freeport finds loopback TCP ports for the servers that tests
// start as child processes: ports nothing listens on, which no outgoing
// connection will take before the server binds them.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// below is how many ports under the kernel's ephemeral range ports are
// chosen from.
const below = 16384

// Ports returns n different loopback TCP ports that nothing listens on
// just now, chosen at random below the kernel's ephemeral port range.
// A port the kernel picks for a listener on port 0 comes from that
// range, and once the listener closes, the kernel may hand the same port
// to any outgoing connection as its local port (a test's clients, an
// etcd talking to itself) before the server meant for it binds it, which
// then fails with "address already in use". A port below the range is
// taken only by a listener that asks for it. Where the range cannot be
// read (not Linux), the ports come from port 0.
func Ports(n int) ([]int, error) {
	low, ok := ephemeralLow()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries == 100*n {
			return nil, fmt.Errorf("free port: no free port among %d tries below %d", tries, low)
		}
		addr := "127.0.0.1:0"
		if ok {
			addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(low-1-rand.IntN(min(below, low-1024))))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if !ok {
				return nil, fmt.Errorf("free port: %w", err)
			}
			continue // taken: try another
		}
		defer l.Close() // held until all are chosen, so that they differ
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Port returns one port as Ports does.
func Port() (int, error) {
	ports, err := Ports(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// ephemeralLow returns the lowest port of the kernel's ephemeral range,
// when it is known and leaves room below it.
func ephemeralLow() (int, bool) {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, false
	}
	fields := strings.Fields(string(data))
	if len(fields) != 2 {
		return 0, false
	}
	low, err := strconv.Atoi(fields[0])
	if err != nil || low <= 2048 {
		return 0, false
	}
	return low, true
}

// T is the part of a testing.TB that ForTest uses; taking it rather than
// testing.TB keeps package testing out of the binaries that use Port.
type T interface {
	Helper()
	Fatal(args ...any)
}

// ForTest returns one port as Port does, and fails t when there is none.
func ForTest(t T) int {
	t.Helper()
	p, err := Port()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
