package berth

import (
	"errors"
	"testing"
	"time"
)

func TestParsePrice(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]float64{"0.60/h": 0.6, "$0.60/h": 0.6, "0.6": 0.6, " 2/h ": 2, "0": 0} {
		if got, err := ParsePrice(in); err != nil || got != want {
			t.Errorf("ParsePrice(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "cheap", "0.60/day", "NaN", "Inf/h", "0.60/h/h"} {
		if got, err := ParsePrice(in); err == nil {
			t.Errorf("ParsePrice(%q) = %v, want an error", in, got)
		}
	}
}

func TestInstanceSpentAndStarting(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	in := &Instance{PricePerH: 0.5, CreatedAt: t0, Phase: InstanceSSH}
	if got := in.Spent(t0.Add(90 * time.Minute)); got != 0.75 {
		t.Errorf("Spent after 90m at 0.5/h = %v, want 0.75", got)
	}
	if !in.Starting() {
		t.Error("an instance in phase ssh is not starting")
	}
	in.Phase, in.EndedAt = InstanceDestroyed, t0.Add(time.Hour)
	if got := in.Spent(t0.Add(5 * time.Hour)); got != 0.5 || in.Starting() {
		t.Errorf("a destroyed instance: spent %v (want 0.5, billed until its end), starting %v", got, in.Starting())
	}
	if got := (&Instance{PricePerH: 1}).Spent(t0); got != 0 {
		t.Errorf("an instance never created spent %v", got)
	}
}

func TestPoolWorkload(t *testing.T) {
	t.Parallel()
	base := func() *Pool {
		return &Pool{Name: "rent", Provider: ProviderVast, GPUType: "RTX 4090", GPUs: 1, MaxInstances: 1, MaxPrice: 1,
			IdleTimeout: Duration(time.Minute)}
	}
	p := base()
	p.SetDefaults()
	if err := p.Validate(); err != nil || p.Workload != WorkloadAgent || p.Port != 0 {
		t.Fatalf("a pool with no workload: %v, workload %q, port %d; want valid, agent, no port", err, p.Workload, p.Port)
	}
	p = base()
	p.Workload, p.Model = WorkloadVLLM, "Qwen/Qwen2.5-0.5B-Instruct"
	p.SetDefaults()
	if err := p.Validate(); err != nil || p.Port != DefaultVLLMPort {
		t.Fatalf("a vllm pool with a model: %v, port %d; want valid, port %d", err, p.Port, DefaultVLLMPort)
	}
	for _, c := range []struct {
		name  string
		set   func(*Pool)
		field string
	}{
		{"unknown workload", func(p *Pool) { p.Workload = "triton" }, "workload"},
		{"vllm without a model", func(p *Pool) { p.Workload = WorkloadVLLM }, "model"},
		{"a model with a quote", func(p *Pool) { p.Workload, p.Model = WorkloadVLLM, "a'b" }, "model"},
		{"vllm on port 22", func(p *Pool) { p.Workload, p.Model, p.Port = WorkloadVLLM, "m", 22 }, "port"},
		{"vllm on port 70000", func(p *Pool) { p.Workload, p.Model, p.Port = WorkloadVLLM, "m", 70000 }, "port"},
		{"negative max model len", func(p *Pool) { p.Workload, p.Model, p.MaxModelLen = WorkloadVLLM, "m", -1 }, "max_model_len"},
		{"agent with a model", func(p *Pool) { p.Model = "m" }, "model"},
		{"agent with a port", func(p *Pool) { p.Port = 8000 }, "port"},
		{"agent with a max model len", func(p *Pool) { p.MaxModelLen = 4096 }, "max_model_len"},
	} {
		p := base()
		c.set(p)
		p.SetDefaults()
		var e *Error
		if err := p.Validate(); !errors.As(err, &e) || e.Field != c.field || e.Code != ECodeInvalid {
			t.Errorf("%s: Validate() = %v, want invalid %s", c.name, err, c.field)
		}
	}
}
