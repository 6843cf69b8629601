package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// fakeSMI writes an nvidia-smi stand-in that checks it was asked the right
// question, then prints out (to stdout) and exits with code; asked -L, it
// lists no MIG devices.
func fakeSMI(t *testing.T, out string, code int) string {
	t.Helper()
	return fakeSMIList(t, out, "", code)
}

// fakeSMIList is fakeSMI answering -L with list.
func fakeSMIList(t *testing.T, out, list string, code int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nvidia-smi")
	script := `#!/bin/sh
if [ "$*" = "-L" ]; then
cat <<'LIST'
` + list + `LIST
exit 0
fi
if [ "$#" -ne 2 ] || [ "$1" != "--query-gpu=index,uuid,name,memory.total" ] || [ "$2" != "--format=csv,noheader,nounits" ]; then
	echo "fake nvidia-smi: unexpected arguments: $*" >&2
	exit 64
fi
cat <<'OUT'
` + out + `OUT
exit ` + strconv.Itoa(code) + "\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// discover runs DiscoverGPUs, retrying while the kernel still sees the
// script open for writing in a child forked by a parallel test (ETXTBSY).
func discover(t *testing.T, smi string) ([]berth.GPU, error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		gpus, err := DiscoverGPUs(context.Background(), smi)
		if !errors.Is(err, syscall.ETXTBSY) || time.Now().After(deadline) {
			return gpus, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDiscoverTwoGPUs(t *testing.T) {
	t.Parallel()
	smi := fakeSMI(t, `0, GPU-5f8c8a1e-2b1d-4c7e-9a3b-0d6e1f2a3b4c, NVIDIA A100-SXM4-40GB, 40960
1, GPU-7a9b0c1d-3e4f-5a6b-7c8d-9e0f1a2b3c4d, NVIDIA A100-SXM4-40GB, 40960
`, 0)
	gpus, err := discover(t, smi)
	if err != nil {
		t.Fatal(err)
	}
	want := []berth.GPU{
		{Index: 0, UUID: "GPU-5f8c8a1e-2b1d-4c7e-9a3b-0d6e1f2a3b4c", Model: "NVIDIA A100-SXM4-40GB", Memory: 40 << 30},
		{Index: 1, UUID: "GPU-7a9b0c1d-3e4f-5a6b-7c8d-9e0f1a2b3c4d", Model: "NVIDIA A100-SXM4-40GB", Memory: 40 << 30},
	}
	if len(gpus) != len(want) {
		t.Fatalf("got %d GPUs, want %d: %+v", len(gpus), len(want), gpus)
	}
	for i := range want {
		if gpus[i] != want[i] {
			t.Errorf("gpu %d = %+v, want %+v", i, gpus[i], want[i])
		}
	}
}

// TestDiscoverMIG: a GPU split into MIG devices (nvidia-smi -L lists them
// under it) becomes its devices, GPUs of their own with the profile as the
// model, indexed after the machine's GPUs; the other GPU stays whole.
func TestDiscoverMIG(t *testing.T) {
	t.Parallel()
	smi := fakeSMIList(t, `0, GPU-aaaa, NVIDIA A100-SXM4-80GB, 81920
1, GPU-bbbb, NVIDIA A100-SXM4-80GB, 81920
`, `GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-aaaa)
  MIG 3g.40gb     Device  0: (UUID: MIG-1111)
  MIG 1g.10gb     Device  1: (UUID: MIG-2222)
GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-bbbb)
`, 0)
	gpus, err := discover(t, smi)
	if err != nil {
		t.Fatal(err)
	}
	want := []berth.GPU{
		{Index: 1, UUID: "GPU-bbbb", Model: "NVIDIA A100-SXM4-80GB", Memory: 80 << 30},
		{Index: 2, UUID: "MIG-1111", Model: "3g.40gb", Memory: 38146 << 20, Parent: "GPU-aaaa"},
		{Index: 3, UUID: "MIG-2222", Model: "1g.10gb", Memory: 9536 << 20, Parent: "GPU-aaaa"},
	}
	if fmt.Sprint(gpus) != fmt.Sprint(want) {
		t.Fatalf("gpus = %+v\nwant %+v", gpus, want)
	}
	if got := gpuDevices([]int{1, 3}, gpus); fmt.Sprint(got) != "[1 MIG-2222]" {
		t.Errorf("CUDA_VISIBLE_DEVICES entries = %q; want the index, then the MIG device's UUID", got)
	}
	if got := gpuDevices([]int{1}, gpus); got != nil {
		t.Errorf("entries of a whole GPU = %q; want nil (its index)", got)
	}
	_, err = discover(t, fakeSMIList(t, "0, GPU-aaaa, NVIDIA A100, 81920\n", "GPU 0: NVIDIA A100 (UUID: GPU-aaaa)\n  MIG 1g.weird Device  0: (UUID: MIG-1)\n", 0))
	if err == nil || !strings.Contains(err.Error(), "profile naming its memory") {
		t.Errorf("a MIG profile without memory = %v; want an error", err)
	}
}

func TestDiscoverEightGPUs(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	// Printed out of order, without spaces after some commas, with CRLF.
	for _, i := range []int{4, 5, 6, 7, 0, 1, 2, 3} {
		out.WriteString(strconv.Itoa(i) + ",GPU-0000000" + strconv.Itoa(i) + "-aaaa-bbbb-cccc-dddddddddddd,  NVIDIA H100 80GB HBM3 ,81559\r\n")
	}
	gpus, err := discover(t, fakeSMI(t, out.String(), 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 8 {
		t.Fatalf("got %d GPUs, want 8: %+v", len(gpus), gpus)
	}
	for i, g := range gpus {
		if g.Index != i || g.Model != "NVIDIA H100 80GB HBM3" || g.Memory != 81559<<20 ||
			g.UUID != "GPU-0000000"+strconv.Itoa(i)+"-aaaa-bbbb-cccc-dddddddddddd" {
			t.Errorf("gpu %d = %+v", i, g)
		}
	}
}

func TestDiscoverNoGPUs(t *testing.T) {
	t.Parallel()
	gpus, err := discover(t, fakeSMI(t, "", 0))
	if err != nil || len(gpus) != 0 {
		t.Fatalf("empty output = %+v, %v; want no GPUs and no error", gpus, err)
	}
}

func TestDiscoverMalformed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, out, want string }{
		{"too few fields", "0, GPU-1, 40960\n", "want 4 comma-separated fields"},
		{"bad index", "zero, GPU-1, NVIDIA A100, 40960\n", `index "zero" is not a number`},
		{"memory not supported", "0, GPU-1, NVIDIA GH200, [N/A]\n", `memory.total "[N/A]" is not a number of MiB`},
		{"duplicate index", "0, GPU-1, NVIDIA A100, 40960\n0, GPU-2, NVIDIA A100, 40960\n", "index 0 appears twice"},
		{"empty name", "0, GPU-1, , 40960\n", "empty uuid or name"},
		{"csv header", "index, uuid, name, memory.total [MiB]\n", `index "index" is not a number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			gpus, err := discover(t, fakeSMI(t, tc.out, 0))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "nvidia-smi: output line") {
				t.Fatalf("DiscoverGPUs = %+v, %v; want an error containing %q", gpus, err, tc.want)
			}
		})
	}
}

func TestDiscoverFailure(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "nvidia-smi")
	script := "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.' >&2\nexit 9\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := discover(t, path)
	if err == nil || !strings.Contains(err.Error(), "exit status 9") || !strings.Contains(err.Error(), "could not communicate with the NVIDIA driver") {
		t.Fatalf("DiscoverGPUs error = %v; want the exit status and nvidia-smi's message", err)
	}

	// Failures that nvidia-smi prints on stdout are reported too.
	_, err = discover(t, fakeSMI(t, "No devices were found\n", 6))
	if err == nil || !strings.Contains(err.Error(), "exit status 6") || !strings.Contains(err.Error(), "No devices were found") {
		t.Fatalf("DiscoverGPUs error = %v; want the exit status and the stdout message", err)
	}

	_, err = discover(t, filepath.Join(t.TempDir(), "missing-nvidia-smi"))
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("DiscoverGPUs of a missing binary = %v; want a not-exist error", err)
	}
}

func TestFakeSMIRejectsOtherArguments(t *testing.T) {
	t.Parallel()
	// The tests above pass only if DiscoverGPUs asks the question the fake
	// checks for; show that the fake does reject anything else.
	smi := fakeSMI(t, "0, GPU-1, NVIDIA A100, 40960\n", 0)
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command(smi, "--query-gpu=index,name", "--format=csv").CombinedOutput()
		if errors.Is(err, syscall.ETXTBSY) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 64 || !strings.Contains(string(out), "unexpected arguments") {
			t.Fatalf("fake nvidia-smi with other arguments = %q, %v; want exit 64", out, err)
		}
		return
	}
}

func TestFindNvidiaSMI(t *testing.T) {
	t.Parallel()
	path, ok := FindNvidiaSMI()
	if ok != (path != "") {
		t.Fatalf("FindNvidiaSMI = %q, %v: path and found disagree", path, ok)
	}
}

func TestParseRealH100Output(t *testing.T) {
	t.Parallel()
	// Captured from nvidia-smi on an H100 machine, byte for byte.
	out := "0, GPU-340e3044-1cd3-d7ed-3add-8cd116c604c7, NVIDIA H100 80GB HBM3, 81559\n"
	gpus, err := parseGPUs(out)
	if err != nil {
		t.Fatal(err)
	}
	want := berth.GPU{Index: 0, UUID: "GPU-340e3044-1cd3-d7ed-3add-8cd116c604c7", Model: "NVIDIA H100 80GB HBM3", Memory: 81559 << 20}
	if len(gpus) != 1 || gpus[0] != want {
		t.Fatalf("parseGPUs = %+v, want [%+v]", gpus, want)
	}
}
