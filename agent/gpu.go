package agent

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth"
)

// gpuQuery is what DiscoverGPUs asks nvidia-smi for.
var gpuQuery = []string{"--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"}

// FindNvidiaSMI returns the path of nvidia-smi in PATH, and whether there
// is one.
func FindNvidiaSMI() (string, bool) {
	p, err := exec.LookPath("nvidia-smi")
	return p, err == nil
}

// DiscoverGPUs lists the GPUs of this machine by running nvidiaSMI (the
// path of nvidia-smi), ordered by index. It returns an error that includes
// nvidia-smi's own message when it cannot be run or exits non-zero, and an
// error naming the line when its output is malformed. Without a deadline in
// ctx it gives nvidia-smi 30 seconds (a wedged driver can hang it).
func DiscoverGPUs(ctx context.Context, nvidiaSMI string) ([]berth.GPU, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, nvidiaSMI, gpuQuery...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" { // nvidia-smi prints some failures on stdout
			msg = strings.TrimSpace(stdout.String())
		}
		if len(msg) > 1000 {
			msg = msg[:1000] + "…"
		}
		if msg != "" {
			return nil, fmt.Errorf("nvidia-smi: %w: %s", err, msg)
		}
		return nil, fmt.Errorf("nvidia-smi: %w", err)
	}
	gpus, err := parseGPUs(stdout.String())
	if err != nil {
		return nil, fmt.Errorf("nvidia-smi: %w", err)
	}
	return gpus, nil
}

// parseGPUs parses "index, uuid, name, memory MiB" lines. The name may hold
// spaces or even commas: it is everything between the uuid and the memory.
func parseGPUs(out string) ([]berth.GPU, error) {
	var gpus []berth.GPU
	for n, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("output line %d %q: %s", n+1, line, fmt.Sprintf(format, args...))
		}
		f := strings.Split(line, ",")
		if len(f) < 4 {
			return nil, bad("want 4 comma-separated fields (index, uuid, name, memory.total), got %d", len(f))
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		idx, err := strconv.Atoi(f[0])
		if err != nil || idx < 0 {
			return nil, bad("index %q is not a number", f[0])
		}
		uuid, name, memStr := f[1], strings.Join(f[2:len(f)-1], ", "), f[len(f)-1]
		if uuid == "" || name == "" {
			return nil, bad("empty uuid or name")
		}
		mib, err := strconv.ParseInt(memStr, 10, 64)
		if err != nil || mib <= 0 || mib > 1<<30 {
			return nil, bad("memory.total %q is not a number of MiB (declare the GPUs with --gpus instead)", memStr)
		}
		for _, g := range gpus {
			if g.Index == idx {
				return nil, bad("index %d appears twice", idx)
			}
		}
		gpus = append(gpus, berth.GPU{Index: idx, UUID: uuid, Model: name, Memory: berth.Bytes(mib << 20)})
	}
	slices.SortFunc(gpus, func(a, b berth.GPU) int { return a.Index - b.Index })
	return gpus, nil
}
