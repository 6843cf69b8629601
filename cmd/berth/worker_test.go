package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
)

func TestWorkerOnOff(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	code, out, errOut := c.run("worker", "off", "--queue", "gpu", "--policy", "drain", "--by", "ops", "spark")
	// No agent has joined as spark: it is done, with a warning (a typo?).
	warning := "berth: warning: no worker with host \"spark\" has registered (see berth workers); an agent joining as spark will take this setting\n"
	if code != 0 || out != "queue gpu of spark: off (drain)\n" || errOut != warning {
		t.Fatalf("worker off: exit %d, %q, %q", code, out, errOut)
	}
	code, out, _ = c.run("worker", "off", "spark", "--by", "ops")
	if code != 0 || out != "every queue of spark: off (hard)\n" {
		t.Fatalf("worker off every queue: exit %d, %q", code, out)
	}
	code, out, _ = c.run("worker", "on", "-o", "json", "--queue", "cpu", "spark")
	var resp berth.ControlResponse
	if code != 0 || json.Unmarshal([]byte(out), &resp) != nil || len(resp.Controls) != 3 {
		t.Fatalf("worker on -o json: exit %d, %q", code, out)
	}
	got := map[string]string{}
	for _, ctl := range resp.Controls {
		got[ctl.Queue] = ctl.DesiredState + "/" + ctl.StopPolicy
	}
	if got["*"] != "off/hard" || got["gpu"] != "off/hard" || got["cpu"] != "on/hard" {
		t.Fatalf("controls = %v, want * and gpu off (hard), cpu on", got)
	}
	if s := desiredSummary(&berth.Worker{Controls: resp.Controls}); s != "off (hard) cpu:on gpu:off(hard)" {
		t.Fatalf("DESIRED = %q", s)
	}
	code, out, _ = c.run("worker", "on", "-o", "json", "spark")
	if code != 0 || json.Unmarshal([]byte(out), &resp) != nil {
		t.Fatalf("worker on every queue -o json: exit %d, %q", code, out)
	}
	if s := desiredSummary(&berth.Worker{Controls: resp.Controls}); s != "on" {
		t.Fatalf("DESIRED once every queue is on again = %q, want on", s)
	}
}

func TestWorkerBadInput(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	for _, args := range [][]string{
		{"worker"},
		{"worker", "sideways", "spark"},
		{"worker", "off"},
		{"worker", "off", "a", "b"},
		{"worker", "off", "-bad-"},
		{"worker", "off", "--policy", "gentle", "spark"},
		{"worker", "off", "--queue", "GPU", "spark"},
		{"worker", "on", "--policy", "drain", "spark"},
	} {
		code, out, errOut := c.run(args...)
		if code != exitUsage || out != "" || errOut == "" {
			t.Errorf("%s: exit %d, %q, %q; want exit 2 with an error", strings.Join(args, " "), code, out, errOut)
		}
	}
	code, out, _ := c.run("worker", "on", "-o", "json", "spark")
	var resp berth.ControlResponse
	if code != 0 || json.Unmarshal([]byte(out), &resp) != nil || len(resp.Controls) != 1 || resp.Controls[0].Off() {
		t.Fatalf("after bad input, spark's controls = %q; want only the one just set", out)
	}
}
