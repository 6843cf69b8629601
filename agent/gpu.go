package agent

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth"
)

// smiQuery is one question to nvidia-smi: the fields of one kind of row
// ("gpu", "compute-apps"), answered as CSV without header or units.
type smiQuery struct {
	kind   string
	fields []string
}

var (
	// gpuQuery is what DiscoverGPUs asks.
	gpuQuery = smiQuery{"gpu", []string{"index", "uuid", "name", "memory.total"}}
	// healthQuery is what the GPU health check asks.
	healthQuery = smiQuery{"gpu", []string{"index", "uuid", "ecc.errors.uncorrected.volatile.total"}}
	// statsQuery is what the GPU health check asks for the dashboard's
	// load figures.
	statsQuery = smiQuery{"gpu", []string{"index", "utilization.gpu", "memory.used"}}
	// appsQuery is what a hard stop asks to confirm GPU memory was released.
	appsQuery = smiQuery{"compute-apps", []string{"gpu_uuid", "pid", "used_memory"}}
)

func (q smiQuery) args() []string {
	return []string{"--query-" + q.kind + "=" + strings.Join(q.fields, ","), "--format=csv,noheader,nounits"}
}

// smiRow is one line of nvidia-smi's output, split into trimmed fields.
type smiRow struct {
	n      int // line number, from 1
	line   string
	fields []string
}

func (r smiRow) errorf(format string, args ...any) error {
	return fmt.Errorf("output line %d %q: %s", r.n, r.line, fmt.Sprintf(format, args...))
}

// run asks nvidiaSMI (the path of nvidia-smi) q and returns its rows. It
// returns an error that includes nvidia-smi's own message when it cannot
// be run or exits non-zero, and an error naming the line when a line has
// fewer fields than q asks for. Without a deadline in ctx it gives
// nvidia-smi 30 seconds (a wedged driver can hang it).
func (q smiQuery) run(ctx context.Context, nvidiaSMI string) ([]smiRow, error) {
	out, err := runSMI(ctx, nvidiaSMI, q.args()...)
	if err != nil {
		return nil, err
	}
	rows, err := q.parse(out)
	if err != nil {
		return nil, fmt.Errorf("nvidia-smi: %w", err)
	}
	return rows, nil
}

// runSMI runs nvidiaSMI with args and returns what it printed, or an error
// with nvidia-smi's own message when it cannot be run or exits non-zero.
// Without a deadline in ctx it gives nvidia-smi 30 seconds.
func runSMI(ctx context.Context, nvidiaSMI string, args ...string) (string, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, nvidiaSMI, args...)
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
			return "", fmt.Errorf("nvidia-smi: %w: %s", err, msg)
		}
		return "", fmt.Errorf("nvidia-smi: %w", err)
	}
	return stdout.String(), nil
}

// parse splits nvidia-smi's answer to q into rows of at least as many
// fields as q asks for (a GPU name may hold commas), skipping blank lines.
func (q smiQuery) parse(out string) ([]smiRow, error) {
	var rows []smiRow
	for n, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		r := smiRow{n: n + 1, line: line, fields: strings.Split(line, ",")}
		if len(r.fields) < len(q.fields) {
			return nil, r.errorf("want %d comma-separated fields (%s), got %d", len(q.fields), strings.Join(q.fields, ", "), len(r.fields))
		}
		for i := range r.fields {
			r.fields[i] = strings.TrimSpace(r.fields[i])
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// FindNvidiaSMI returns the path of nvidia-smi in PATH, and whether there
// is one.
func FindNvidiaSMI() (string, bool) {
	p, err := exec.LookPath("nvidia-smi")
	return p, err == nil
}

// DiscoverGPUs lists the GPUs of this machine by running nvidiaSMI (the
// path of nvidia-smi), ordered by index; a GPU split into MIG devices
// (nvidia-smi -L lists them under it) is replaced by its devices, each a
// GPU of its own (see withMIG). It returns an error that includes
// nvidia-smi's own message when it cannot be run or exits non-zero, and an
// error naming the line when its output is malformed. Without a deadline in
// ctx it gives nvidia-smi 30 seconds (a wedged driver can hang it).
func DiscoverGPUs(ctx context.Context, nvidiaSMI string) ([]berth.GPU, error) {
	rows, err := gpuQuery.run(ctx, nvidiaSMI)
	if err != nil {
		return nil, err
	}
	gpus, err := gpusOf(rows)
	if err != nil {
		return nil, fmt.Errorf("nvidia-smi: %w", err)
	}
	list, err := runSMI(ctx, nvidiaSMI, "-L")
	if err != nil {
		return nil, err
	}
	if gpus, err = withMIG(gpus, list); err != nil {
		return nil, fmt.Errorf("nvidia-smi -L: %w", err)
	}
	return gpus, nil
}

var (
	listGPURE = regexp.MustCompile(`^GPU (\d+): .*\(UUID: (GPU-[^)]+)\)$`)
	listMIGRE = regexp.MustCompile(`^MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)]+)\)$`)
	migMemRE  = regexp.MustCompile(`\.(\d+)gb`)
)

// withMIG replaces each of gpus that nvidia-smi -L (list, its output)
// shows split into MIG devices ("  MIG 1g.10gb     Device  0: (UUID:
// MIG-…)" under "GPU 0: … (UUID: GPU-…)") by those devices: schedulable
// GPUs of their own, their profile as the model, the memory the profile
// names (10gb: 10GB, in whole MiB: 9536MiB) and the parent GPU's UUID as Parent, indexed after
// the machine's GPUs in the order listed. CUDA_VISIBLE_DEVICES names them
// by UUID. Without MIG devices it returns gpus as they are.
func withMIG(gpus []berth.GPU, list string) ([]berth.GPU, error) {
	devices := map[string][]berth.GPU{} // by parent UUID
	next := 0
	for _, g := range gpus {
		next = max(next, g.Index+1)
	}
	parent := ""
	for n, line := range strings.Split(list, "\n") {
		line = strings.TrimSpace(line)
		if m := listGPURE.FindStringSubmatch(line); m != nil {
			parent = m[2]
			continue
		}
		m := listMIGRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		mem := migMemRE.FindStringSubmatch(m[1])
		if parent == "" || mem == nil {
			return nil, fmt.Errorf("line %d %q: a MIG device needs a GPU line above it and a profile naming its memory (1g.10gb)", n+1, line)
		}
		gb, _ := strconv.ParseInt(mem[1], 10, 64)
		devices[parent] = append(devices[parent], berth.GPU{Index: next, UUID: m[3], Model: m[1], Memory: berth.Bytes(gb*1e9) &^ (1<<20 - 1), Parent: parent})
		next++
	}
	if len(devices) == 0 {
		return gpus, nil
	}
	var out []berth.GPU
	for _, g := range gpus {
		if _, split := devices[g.UUID]; !split {
			out = append(out, g)
		}
	}
	for _, g := range gpus {
		out = append(out, devices[g.UUID]...)
	}
	if len(out) > berth.MaxGPUsPerWorker {
		return nil, fmt.Errorf("%d GPUs and MIG devices: at most %d per worker", len(out), berth.MaxGPUsPerWorker)
	}
	return out, nil
}

// parseGPUs parses nvidia-smi's answer to gpuQuery.
func parseGPUs(out string) ([]berth.GPU, error) {
	rows, err := gpuQuery.parse(out)
	if err != nil {
		return nil, err
	}
	return gpusOf(rows)
}

// gpusOf reads "index, uuid, name, memory MiB" rows. The name may hold
// commas: it is everything between the uuid and the memory.
func gpusOf(rows []smiRow) ([]berth.GPU, error) {
	var gpus []berth.GPU
	for _, r := range rows {
		f := r.fields
		idx, err := strconv.Atoi(f[0])
		if err != nil || idx < 0 {
			return nil, r.errorf("index %q is not a number", f[0])
		}
		uuid, name, memStr := f[1], strings.Join(f[2:len(f)-1], ", "), f[len(f)-1]
		if uuid == "" || name == "" {
			return nil, r.errorf("empty uuid or name")
		}
		mib, err := strconv.ParseInt(memStr, 10, 64)
		if err != nil || mib <= 0 || mib > 1<<30 {
			return nil, r.errorf("memory.total %q is not a number of MiB (declare the GPUs with --gpus instead)", memStr)
		}
		for _, g := range gpus {
			if g.Index == idx {
				return nil, r.errorf("index %d appears twice", idx)
			}
		}
		gpus = append(gpus, berth.GPU{Index: idx, UUID: uuid, Model: name, Memory: berth.Bytes(mib << 20)})
	}
	slices.SortFunc(gpus, func(a, b berth.GPU) int { return a.Index - b.Index })
	return gpus, nil
}
