package berth

import "time"

// Cloud pools: GPUs the team rents from a marketplace (Vast.ai). A pool
// rents instances whose onstart runs berth agent, so that they join the
// queue, within a cap, and gives them back when idle (docs/pools.md).
// These are the domain types; package cloud holds the Provider seam and
// the policies, cloud/vast the Vast implementation, provision the loop.

// Strictness is how choosy a pool is about offers: it maps to the offer
// filters (reliability, verified, direct ports, bandwidth, CUDA version)
// and to how much host history weighs against price.
type Strictness string

// Strictness policies.
const (
	StrictnessStrict     Strictness = "strict"
	StrictnessBalanced   Strictness = "balanced"
	StrictnessAggressive Strictness = "aggressive"
)

// Pool is a cloud pool as stored and managed through /api/v1/pools.
type Pool struct {
	Name         string            `json:"name"`
	Provider     string            `json:"provider"` // "vast"
	GPUType      string            `json:"gpu_type"` // the offers' GPU model, e.g. "RTX 4090"
	GPUs         int               `json:"gpus"`     // GPUs per instance
	MaxInstances int               `json:"max_instances"`
	MaxPrice     float64           `json:"max_price"` // $/h for the whole pool, counted over starting and ready instances
	IdleTimeout  Duration          `json:"idle_timeout"`
	Strictness   Strictness        `json:"strictness"`
	Image        string            `json:"image,omitempty"`  // container image; default the provider's
	URL          string            `json:"url,omitempty"`    // the provider API's base URL (--vast-url); default the provider's
	Queues       []string          `json:"queues,omitempty"` // the queues its agents serve; empty: every queue
	Labels       map[string]string `json:"labels,omitempty"` // labels its agents carry
	// PreserveOnFailure keeps an instance that failed for its host's
	// fault instead of destroying it, for inspection (still capped).
	PreserveOnFailure bool `json:"preserve_on_failure,omitempty"`
	// Workload is what its instances run: WorkloadAgent (berth agent,
	// joining the queue) or WorkloadVLLM (a bare vLLM server of Model on
	// Port, with MaxModelLen when not 0: vLLM's own default).
	Workload    string `json:"workload"`
	Model       string `json:"model,omitempty"`
	MaxModelLen int    `json:"max_model_len,omitempty"`
	Port        int    `json:"port,omitempty"`
	// APIKey is the provider credential: accepted on PUT, never
	// returned; stored sealed (SealedAPIKey).
	APIKey       string    `json:"api_key,omitempty"`
	SealedAPIKey []byte    `json:"-"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// InstancePhase is where a rented instance stands.
type InstancePhase string

// Instance phases, in the order an instance normally passes them; failed
// and destroyed end it.
const (
	InstanceCreating   InstancePhase = "creating"  // create sent, no contract yet
	InstanceCreated    InstancePhase = "created"   // contract made, container not running
	InstanceRunning    InstancePhase = "running"   // container running (actual_status)
	InstanceSSH        InstancePhase = "ssh"       // SSH reachable
	InstanceGPUChecked InstancePhase = "gpu_ok"    // nvidia-smi and libcuda present over SSH
	InstanceReady      InstancePhase = "ready"     // its agent registered with the server (a vLLM node: its server serves the model)
	InstanceDraining   InstancePhase = "draining"  // idle past the timeout, being given back
	InstanceFailed     InstancePhase = "failed"    // a failure ended it (Failure says which class)
	InstanceDestroyed  InstancePhase = "destroyed" // given back; nothing billed any more
)

// An instance's failure class is one of the attempt's (FailureInfraFatal
// blames the host: destroy, quarantine the machine, next offer;
// FailureWorkloadFatal blames the job or image: stop, report, do not blame
// the host; FailureWarmup and FailureUnknown keep waiting within the
// phase's budget).

// Probe is one readiness check an instance went through, as kept on its
// record: the command (or API call), its exit code, its output (secrets
// redacted, cut to a few KiB) and how it was classified.
type Probe struct {
	Phase    InstancePhase `json:"phase"`
	Command  string        `json:"command"`
	ExitCode *int          `json:"exit_code,omitempty"`
	Output   string        `json:"output,omitempty"`
	Class    string        `json:"class,omitempty"` // empty: it passed
	At       time.Time     `json:"at"`
}

// PhaseChange is an entry of an instance's timeline.
type PhaseChange struct {
	Phase  InstancePhase `json:"phase"`
	At     time.Time     `json:"at"`
	Reason string        `json:"reason,omitempty"`
}

// Instance is one rented machine of a pool.
type Instance struct {
	ID         string        `json:"id"` // Berth's id (also the provider label's suffix)
	Pool       string        `json:"pool"`
	ProviderID int64         `json:"provider_id"` // the provider's instance (contract) id; 0 before created
	OfferID    int64         `json:"offer_id"`
	MachineID  int64         `json:"machine_id"`
	GPUName    string        `json:"gpu_name"`
	GPUs       int           `json:"gpus"`
	PricePerH  float64       `json:"price_per_h"` // dph_total at creation
	Phase      InstancePhase `json:"phase"`
	Failure    string        `json:"failure,omitempty"`
	LastError  string        `json:"last_error,omitempty"`
	WorkerHost string        `json:"worker_host,omitempty"` // the host its agent registers as
	SSHAddr    string        `json:"ssh_addr,omitempty"`    // host:port, once known
	Endpoint   string        `json:"endpoint,omitempty"`    // a vLLM node's server, host:port, once ready
	Timeline   []PhaseChange `json:"timeline"`
	Probes     []Probe       `json:"probes,omitempty"`
	CreatedAt  time.Time     `json:"created_at"`
	ReadyAt    time.Time     `json:"ready_at,omitzero"`
	IdleSince  time.Time     `json:"idle_since,omitzero"`
	EndedAt    time.Time     `json:"ended_at,omitzero"` // destroyed or failed

	// HostKey is the SSH host key the instance showed at its first
	// connection (authorized_keys format), pinned: a later connection
	// showing another key is refused, across restarts too.
	HostKey string `json:"host_key,omitempty"`
}

// Live reports whether the instance may still be billed: it is not
// destroyed. (An instance that failed is destroyed, its Failure kept,
// unless its pool preserves failed instances: then it stays failed, and
// billed, until destroyed by hand.)
func (i *Instance) Live() bool { return i.Phase != InstanceDestroyed }

// HostRecord is Berth's memory of one marketplace machine, kept across
// runs: its history and whether it is quarantined.
type HostRecord struct {
	Provider  string `json:"provider"`
	MachineID int64  `json:"machine_id"`
	GPUName   string `json:"gpu_name,omitempty"`
	Driver    string `json:"driver,omitempty"`
	Successes int    `json:"successes"`
	// Failures counts failures by class.
	Failures         map[string]int `json:"failures,omitempty"`
	LastSeen         time.Time      `json:"last_seen"`
	LastFailure      string         `json:"last_failure,omitempty"`
	QuarantinedUntil time.Time      `json:"quarantined_until,omitzero"` // zero: not quarantined
	Blocked          bool           `json:"blocked,omitempty"`          // blocked by hand until unblocked
}
