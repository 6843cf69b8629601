// Package cloud is the seam between Berth's cloud pools and the GPU
// marketplaces they rent from: the Provider interface, what it exchanges
// (offers, instances, create requests), and the policies that do not
// depend on a marketplace (failure classification, strictness filters,
// offer ranking by host history and price). cloud/vast implements
// Provider over Vast.ai's REST API; package provision drives it.
package cloud

import (
	"context"
	"errors"
	"fmt"
)

// Provider is a GPU marketplace. Every method is safe for concurrent use
// and retries rate limits (429) itself with backoff; other errors are
// returned. Implementations never retry a Create.
type Provider interface {
	// Name is the provider's name as pools give it ("vast").
	Name() string
	// SearchOffers returns the offers q selects, in the order q asks.
	SearchOffers(ctx context.Context, q OfferQuery) ([]Offer, error)
	// Create rents offer offerID with req. A refusal that still made a
	// contract is a *CreateError with that Contract: the caller must
	// destroy it.
	Create(ctx context.Context, offerID int64, req CreateRequest) (contract int64, err error)
	// Show returns instance id; one destroyed or unknown is ErrGone.
	Show(ctx context.Context, id int64) (*ProviderInstance, error)
	// List returns the account's instances whose label starts with
	// labelPrefix.
	List(ctx context.Context, labelPrefix string) ([]*ProviderInstance, error)
	// Destroy gives instance id back; one already gone is no error.
	Destroy(ctx context.Context, id int64) error
	// EnsureSSHKey registers publicKey (authorized_keys format) with the
	// account unless it is there already.
	EnsureSSHKey(ctx context.Context, publicKey string) error
}

// ErrGone is the error of Show for an instance the provider no longer has.
var ErrGone = errors.New("instance gone")

// CreateError is a refused create. Contract, when not 0, is an instance
// the refusal still made, which the caller must destroy. Unavailable
// says the offer is taken or gone (try the next one). Retryable says
// nothing was made and the same offer may be tried again later (the
// provider was rate limiting creates).
type CreateError struct {
	Status      int
	Code        string // the provider's error code, e.g. no_such_ask
	Message     string
	Contract    int64
	Unavailable bool
	Retryable   bool
}

func (e *CreateError) Error() string {
	return fmt.Sprintf("create refused (%d %s): %s", e.Status, e.Code, e.Message)
}

// OfferQuery selects offers.
type OfferQuery struct {
	GPUName         string
	GPUs            int
	MinGPURAMMB     int     // 0: any
	MaxPricePerHour float64 // dph_total, 0: any
	MinReliability  float64
	Verified        bool
	MinDirectPorts  int
	MinInetDownMbps float64
	MinCUDA         float64
	ExcludeMachines []int64 // filtered on the client side too
	OrderBy         string  // e.g. "score desc", "dph_total asc"
	Limit           int
}

// Offer is a rentable machine as the marketplace lists it.
type Offer struct {
	ID            int64   `json:"id"`
	MachineID     int64   `json:"machine_id"`
	HostID        int64   `json:"host_id"`
	GPUName       string  `json:"gpu_name"`
	NumGPUs       int     `json:"num_gpus"`
	GPURAMMB      int     `json:"gpu_ram"`
	CPUCores      float64 `json:"cpu_cores_effective"`
	CPURAMMB      int     `json:"cpu_ram"`
	CUDAMaxGood   float64 `json:"cuda_max_good"`
	DriverVersion string  `json:"driver_version"`
	PricePerHour  float64 `json:"dph_total"`
	Reliability   float64 `json:"reliability2"`
	Score         float64 `json:"score"`
	Verified      bool    `json:"verified"`
	DirectPorts   int     `json:"direct_port_count"`
	InetDownMbps  float64 `json:"inet_down"`
	PublicIP      string  `json:"public_ipaddr"`
}

// CreateRequest is what an instance is created with: an explicit
// payload, nothing implied.
type CreateRequest struct {
	Image   string
	Label   string // Berth's label: "berth-" + the instance id
	DiskGB  int
	Env     map[string]string // environment; docker flags ("-p 8000:8000") as keys
	Onstart string            // runs after start: starts berth agent
}

// ProviderInstance is an instance as the marketplace shows it.
type ProviderInstance struct {
	ID             int64
	MachineID      int64
	Label          string
	ActualStatus   string // "" (provisioning), created, loading, running, stopped, frozen, exited, rebooting, unknown, offline
	IntendedStatus string
	CurState       string
	NextState      string
	StatusMsg      string
	PublicIP       string
	SSHHost        string // proxy SSH
	SSHPort        int
	DirectSSHPort  int // ports["22/tcp"][0].HostPort, 0 until running
	// Ports maps the container's TCP ports to the public ports they are
	// reached on at PublicIP (ports["8000/tcp"][0].HostPort), once running.
	Ports        map[int]int
	GPUName      string
	NumGPUs      int
	PricePerHour float64
}
