package main

import (
	"io"
	"strings"
	"testing"

	"github.com/berth-dev/berth/cloud/vast/vasttest"
)

func TestOptions(t *testing.T) {
	t.Parallel()
	c, err := options([]string{"--listen", "127.0.0.1:0", "--machines", "3", "--fault", "1001=cdi", "--fault", "1003=ssh-key"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if oom, err := options([]string{"--listen", "127.0.0.1:0", "--fault", "1002=oom"}, io.Discard); err != nil || oom.opts.Faults[1002] != vasttest.FaultOOM {
		t.Errorf("--fault 1002=oom: %+v, %v", oom, err)
	}
	if c.listen != "127.0.0.1:0" || c.noHosts || c.opts.Machines != 3 || len(c.opts.Faults) != 2 || c.opts.Faults[1001] != vasttest.FaultCDI || c.opts.Faults[1003] != vasttest.FaultSSHKey {
		t.Errorf("options: %+v", c)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--listen is required"},
		{[]string{"--listen", "localhost"}, "--listen"},
		{[]string{"--listen", "127.0.0.1:0", "--machines", "0"}, "--machines"},
		{[]string{"--listen", "127.0.0.1:0", "--fault", "1001"}, "MACHINE=KIND"},
		{[]string{"--listen", "127.0.0.1:0", "--fault", "x=cdi"}, "not a machine id"},
		{[]string{"--listen", "127.0.0.1:0", "--fault", "1001=zap"}, `unknown fault "zap"`},
		{[]string{"--listen", "127.0.0.1:0", "--fault", "1009=cdi"}, "not one of 1001…1004"},
		{[]string{"--listen", "127.0.0.1:0", "--stage", "-1s"}, "--stage"},
		{[]string{"--listen", "127.0.0.1:0", "extra"}, `unexpected argument "extra"`},
		{[]string{"--listen", "127.0.0.1:0", "--no-hosts", "--dir", "/tmp/x"}, "--dir"},
		{[]string{"--listen", "127.0.0.1:0", "--vllm", "/nonexistent/vllm"}, "--vllm"},
		{[]string{"--listen", "127.0.0.1:0", "--vllm", "."}, "--vllm"},
	} {
		if _, err := options(tc.args, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want one saying %q", tc.args, err, tc.want)
		}
	}
}
