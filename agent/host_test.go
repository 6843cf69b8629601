package agent

import (
	"testing"

	"github.com/berth-dev/berth"
)

func TestMemTotal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     berth.Bytes
	}{
		{"linux", "MemTotal:       24586456 kB\nMemFree:         1234 kB\n", 24586456 << 10},
		{"not first", "Foo: 1 kB\nMemTotal: 2048 kB\n", 2 << 20},
		{"no unit", "MemTotal: 4096\n", 4096},
		{"missing", "MemFree: 1 kB\n", 0},
		{"garbage", "MemTotal: lots kB\n", 0},
		{"odd unit", "MemTotal: 1 parsecs\n", 0},
		{"empty", "", 0},
	} {
		if got := memTotal([]byte(tc.in)); got != tc.want {
			t.Errorf("%s: memTotal = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestHostResources(t *testing.T) {
	t.Parallel()
	cpus, mem := HostResources()
	if cpus < 1 {
		t.Errorf("cpus = %v, want at least 1", cpus)
	}
	if mem <= 0 { // this suite runs on Linux, which has /proc/meminfo
		t.Errorf("memory = %v, want the machine's MemTotal", mem)
	}
}
