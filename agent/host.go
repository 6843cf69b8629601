package agent

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/berth-dev/berth"
)

// HostResources returns what this machine offers: the CPUs this process
// may use (runtime.NumCPU) and the total memory from /proc/meminfo, which
// is 0 when it cannot be read (not Linux) or parsed. It never fails.
// Neither figure accounts for cgroup limits.
func HostResources() (cpus float64, memory berth.Bytes) {
	cpus = float64(runtime.NumCPU())
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		memory = memTotal(data)
	}
	return cpus, memory
}

// memTotal parses the MemTotal line of /proc/meminfo ("MemTotal: 24586456
// kB"); 0 if there is none.
func memTotal(meminfo []byte) berth.Bytes {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || n < 0 {
			return 0
		}
		mult := int64(1)
		if len(f) > 1 {
			switch strings.ToLower(f[1]) {
			case "kb":
				mult = 1 << 10
			case "mb":
				mult = 1 << 20
			case "gb":
				mult = 1 << 30
			default:
				return 0
			}
		}
		return berth.Bytes(n * mult)
	}
	return 0
}
