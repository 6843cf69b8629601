package berth

import (
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Pool limits, as PUT /api/v1/pools/{name} checks them.
const (
	MaxPoolGPUs      = 16   // GPUs per instance
	MaxPoolInstances = 1000 // instances per pool
	MaxPoolAPIKey    = 4096 // bytes of a provider API key
)

// ProviderVast is the Vast.ai marketplace, the one provider pools rent
// from.
const ProviderVast = "vast"

// A pool's workloads (Pool.Workload): what its instances run.
const (
	// WorkloadAgent instances run berth agent and join the queue.
	WorkloadAgent = "agent"
	// WorkloadVLLM instances are bare vLLM nodes: vllm serve Model on
	// Port, ready when /v1/models lists the model; they run no jobs.
	WorkloadVLLM = "vllm"
)

// DefaultVLLMPort is the port a vLLM pool's server listens on when the
// pool names none.
const DefaultVLLMPort = 8000

// MaxModelLen is the largest max_model_len a vLLM pool may ask for.
const MaxModelLen = 1 << 24

// SetDefaults fills in what p may leave out: the balanced strictness, the
// agent workload, and a vLLM pool's port.
func (p *Pool) SetDefaults() {
	if p.Strictness == "" {
		p.Strictness = StrictnessBalanced
	}
	if p.Workload == "" {
		p.Workload = WorkloadAgent
	}
	if p.Workload == WorkloadVLLM && p.Port == 0 {
		p.Port = DefaultVLLMPort
	}
}

// Validate checks everything of p but whether an API key is needed, which
// only the server knows (on create it is required; an update without one
// keeps the stored key). Its error names the field; call SetDefaults
// first.
func (p *Pool) Validate() error {
	switch {
	case !ValidQueue(p.Name):
		return Invalidf("name", "%q: must be 1–63 lowercase letters, digits, - or _, starting with a letter or digit", p.Name)
	case p.Provider != ProviderVast:
		return Invalidf("provider", "%q: must be %q", p.Provider, ProviderVast)
	case strings.TrimSpace(p.GPUType) == "":
		return Invalidf("gpu_type", "is required: the offers' GPU model, e.g. \"RTX 4090\"")
	case p.GPUs < 1 || p.GPUs > MaxPoolGPUs:
		return Invalidf("gpus", "must be between 1 and %d, not %d", MaxPoolGPUs, p.GPUs)
	case p.MaxInstances < 1 || p.MaxInstances > MaxPoolInstances:
		return Invalidf("max_instances", "must be between 1 and %d, not %d", MaxPoolInstances, p.MaxInstances)
	case !(p.MaxPrice > 0) || math.IsInf(p.MaxPrice, 0):
		return Invalidf("max_price", "must be more than 0 ($/h for the whole pool)")
	case p.IdleTimeout <= 0:
		return Invalidf("idle_timeout", "must be more than 0, e.g. 10m")
	}
	switch p.Strictness {
	case StrictnessStrict, StrictnessBalanced, StrictnessAggressive:
	default:
		return Invalidf("strictness", "%q: must be strict, balanced or aggressive", p.Strictness)
	}
	if p.URL != "" {
		if u, err := url.Parse(p.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return Invalidf("url", "%q: must be an http:// or https:// URL", p.URL)
		}
	}
	for _, q := range p.Queues {
		if !ValidQueue(q) {
			return Invalidf("queues", "%q is not a valid queue name", q)
		}
	}
	for k := range p.Labels {
		if k == "" {
			return Invalidf("labels", "label names must not be empty")
		}
	}
	if len(p.APIKey) > MaxPoolAPIKey {
		return Invalidf("api_key", "must be at most %d bytes", MaxPoolAPIKey)
	}
	return p.validateWorkload()
}

// validateWorkload checks the workload and its fields: a vLLM pool needs
// a model, a port in 1–65535 (not 22, the instances' SSH) and a
// max_model_len of 0 (vLLM's default) to MaxModelLen; an agent pool sets
// none of them.
func (p *Pool) validateWorkload() error {
	switch p.Workload {
	case WorkloadAgent:
		switch {
		case p.Model != "":
			return Invalidf("model", "is for a vllm workload, not %q", p.Workload)
		case p.MaxModelLen != 0:
			return Invalidf("max_model_len", "is for a vllm workload, not %q", p.Workload)
		case p.Port != 0:
			return Invalidf("port", "is for a vllm workload, not %q", p.Workload)
		}
	case WorkloadVLLM:
		switch {
		case strings.TrimSpace(p.Model) == "":
			return Invalidf("model", "is required for a vllm workload: the model to serve, e.g. Qwen/Qwen2.5-0.5B-Instruct")
		case strings.ContainsAny(p.Model, " \t\n'\"\\$`"):
			return Invalidf("model", "%q: must be a model id or path, without spaces, quotes or $", p.Model)
		case len(p.Model) > 256:
			return Invalidf("model", "must be at most 256 bytes")
		case p.MaxModelLen < 0 || p.MaxModelLen > MaxModelLen:
			return Invalidf("max_model_len", "must be between 0 (vLLM's default) and %d tokens, not %d", MaxModelLen, p.MaxModelLen)
		case p.Port < 1 || p.Port > 65535 || p.Port == 22:
			return Invalidf("port", "must be between 1 and 65535 and not 22 (SSH), not %d", p.Port)
		}
	default:
		return Invalidf("workload", "%q: must be %q or %q", p.Workload, WorkloadAgent, WorkloadVLLM)
	}
	return nil
}

// ParsePrice parses a price in dollars an hour: "0.60", "0.60/h" or
// "$0.60/h". Its error says what a price looks like.
func ParsePrice(s string) (float64, error) {
	v := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "$"), "/h")
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a price such as 0.60/h (dollars an hour)", s)
	}
	return f, nil
}

// Starting reports whether the instance is on its way to ready: created
// or being created and not yet ready, failed or given back.
func (i *Instance) Starting() bool {
	switch i.Phase {
	case InstanceCreating, InstanceCreated, InstanceRunning, InstanceSSH, InstanceGPUChecked:
		return true
	}
	return false
}

// Spent is what the instance has cost by now: its price times the time it
// has been billed, from its creation to its end (now while it lasts).
func (i *Instance) Spent(now time.Time) float64 {
	end := now
	if !i.EndedAt.IsZero() {
		end = i.EndedAt
	}
	if i.CreatedAt.IsZero() || !end.After(i.CreatedAt) {
		return 0
	}
	return i.PricePerH * end.Sub(i.CreatedAt).Hours()
}

// PoolInfo is a pool as GET /api/v1/pools answers it: without its key,
// with what its live instances add up to.
type PoolInfo struct {
	*Pool
	// APIKeySet says a key is stored (the key itself is never answered).
	APIKeySet bool `json:"api_key_set"`
	// Ready and Starting count its instances that are ready, and those on
	// their way to ready.
	Ready    int `json:"ready"`
	Starting int `json:"starting"`
	// SpendPerH is what its live (billed) instances cost an hour.
	SpendPerH float64 `json:"spend_per_h"`
}

// PoolList is the answer of GET /api/v1/pools, by name.
type PoolList struct {
	Pools []*PoolInfo `json:"pools"`
}

// InstanceList is the answer of GET /api/v1/instances, oldest first.
type InstanceList struct {
	Instances []*Instance `json:"instances"`
}

// HostList is the answer of GET /api/v1/hosts, by machine id.
type HostList struct {
	Hosts []*HostRecord `json:"hosts"`
}

// HostsCleared is the answer of DELETE /api/v1/hosts: how many host
// records were deleted.
type HostsCleared struct {
	Deleted int `json:"deleted"`
}
