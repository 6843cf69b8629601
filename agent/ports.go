package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Defaults of a PortConfig left zero.
const (
	// DefaultPortLo and DefaultPortHi bound the ports an agent hands to
	// service attempts.
	DefaultPortLo = 8000
	DefaultPortHi = 9000
	// DefaultPortTTL is how long a held port's owner may go unconfirmed
	// (Touch) before Reclaim frees the port.
	DefaultPortTTL = 10 * time.Minute
)

// ErrNoFreePort is in the chain of the error Allocate returns when every
// port of the range is held or bound by another process.
var ErrNoFreePort = errors.New("no free port")

// PortConfig configures a PortAllocator. Zero fields take the defaults.
type PortConfig struct {
	// Lo and Hi bound the range, both included; both zero: DefaultPortLo
	// and DefaultPortHi.
	Lo, Hi int
	// Path is the JSON file the held ports are kept in (e.g.
	// DATA_DIR/ports.json), replaced whole (temporary file and rename) on
	// every change; empty: the ports are kept in memory only.
	Path string
	// TTL is how long an owner may go unconfirmed before Reclaim frees its
	// ports; 0: DefaultPortTTL.
	TTL time.Duration
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// Bound reports whether another process on the machine is listening on
	// port; nil: PortBound. Allocate skips such ports.
	Bound func(port int) bool
}

// PortLease is one held port.
type PortLease struct {
	Port  int    `json:"port"`
	Owner string `json:"owner"` // the attempt id
	// Since is when the port was allocated.
	Since time.Time `json:"since"`
	// Confirmed is when the owner was last confirmed (Allocate, Touch,
	// Recover, or loading the file). It is not persisted: a restarted
	// agent gives every loaded lease a fresh TTL to call Recover in.
	Confirmed time.Time `json:"-"`
}

// PortAllocator hands out the TCP ports of one worker's range to service
// attempts. No port is handed out twice while it is held; ports another
// process is listening on are skipped. The held ports survive an agent
// restart through the state file, so that a restarted agent keeps the
// ports of the attempts it adopts (Recover) instead of handing them out
// again. A port whose owner goes unconfirmed for TTL is freed by Reclaim.
// It is safe for concurrent use.
type PortAllocator struct {
	lo, hi int
	path   string
	ttl    time.Duration
	now    func() time.Time
	bound  func(int) bool

	mu   sync.Mutex
	held map[int]PortLease // port → lease
	next int               // where the next search starts, so a freed port is not reused at once
}

// portFile is the state file's content.
type portFile struct {
	Version int         `json:"version"`
	Leases  []PortLease `json:"leases"`
}

// NewPortAllocator returns an allocator for cfg, holding the ports listed
// in cfg.Path if that file exists (each confirmed now). It returns an error
// if the range is not 1 ≤ Lo ≤ Hi ≤ 65535, TTL is negative, or the file
// cannot be read or is malformed (bad JSON, a port outside 1–65535, an
// empty owner, a port listed twice); it changes no file.
func NewPortAllocator(cfg PortConfig) (*PortAllocator, error) {
	if cfg.Lo == 0 && cfg.Hi == 0 {
		cfg.Lo, cfg.Hi = DefaultPortLo, DefaultPortHi
	}
	if cfg.Lo < 1 || cfg.Hi > 65535 || cfg.Lo > cfg.Hi {
		return nil, fmt.Errorf("port allocator: range %d–%d: must be within 1–65535, low ≤ high", cfg.Lo, cfg.Hi)
	}
	if cfg.TTL < 0 {
		return nil, fmt.Errorf("port allocator: ttl %v is negative", cfg.TTL)
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultPortTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Bound == nil {
		cfg.Bound = PortBound
	}
	a := &PortAllocator{
		lo: cfg.Lo, hi: cfg.Hi, path: cfg.Path, ttl: cfg.TTL,
		now: cfg.Now, bound: cfg.Bound,
		held: map[int]PortLease{}, next: cfg.Lo,
	}
	if cfg.Path == "" {
		return a, nil
	}
	data, err := os.ReadFile(cfg.Path)
	if errors.Is(err, os.ErrNotExist) {
		return a, nil
	}
	if err != nil {
		return nil, fmt.Errorf("port allocator: %w", err)
	}
	var f portFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("port allocator: %s: %w", cfg.Path, err)
	}
	now := a.now()
	for _, l := range f.Leases {
		switch {
		case l.Port < 1 || l.Port > 65535:
			return nil, fmt.Errorf("port allocator: %s: port %d is outside 1–65535", cfg.Path, l.Port)
		case l.Owner == "":
			return nil, fmt.Errorf("port allocator: %s: port %d has no owner", cfg.Path, l.Port)
		}
		if _, dup := a.held[l.Port]; dup {
			return nil, fmt.Errorf("port allocator: %s: port %d is listed twice", cfg.Path, l.Port)
		}
		l.Confirmed = now
		a.held[l.Port] = l
	}
	return a, nil
}

// PortBound reports whether some process on this machine is listening on
// TCP port (on any address): whether listening on 0.0.0.0:port fails. A
// failure other than "address in use" (a privileged port, say) also counts
// as bound, since a service could not listen there either.
func PortBound(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("0.0.0.0", strconv.Itoa(port)))
	if err != nil {
		return true
	}
	_ = l.Close()
	return false
}

// Allocate holds a free port of the range for owner (an attempt id) and
// returns it; an owner may hold several. The search starts after the port
// allocated last, so a port just released is not handed out again at once.
// It returns an error, holding nothing, when owner is empty, when no port
// is free (ErrNoFreePort: "no free port in 8000–9000: N held, M bound by
// other processes"), or when the state file cannot be written.
func (a *PortAllocator) Allocate(owner string) (int, error) {
	if owner == "" {
		return 0, errors.New("allocate port: owner is empty")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.hi - a.lo + 1
	held, bound := 0, 0
	for i := range n {
		port := a.lo + (a.next-a.lo+i)%n
		if _, ok := a.held[port]; ok {
			held++
			continue
		}
		if a.bound(port) {
			bound++
			continue
		}
		now := a.now()
		a.held[port] = PortLease{Port: port, Owner: owner, Since: now, Confirmed: now}
		if err := a.saveLocked(); err != nil {
			delete(a.held, port)
			return 0, fmt.Errorf("allocate port: %w", err)
		}
		a.next = port + 1
		if a.next > a.hi {
			a.next = a.lo
		}
		return port, nil
	}
	msg := fmt.Sprintf("%d held", held)
	if bound > 0 {
		msg += fmt.Sprintf(", %d bound by other processes", bound)
	}
	return 0, fmt.Errorf("%w in %d–%d: %s", ErrNoFreePort, a.lo, a.hi, msg)
}

// Release frees every port owner holds and returns them. Releasing an
// owner holding nothing does nothing. It returns an error, freeing
// nothing, when the state file cannot be written.
func (a *PortAllocator) Release(owner string) ([]int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	freed := a.dropLocked(func(l PortLease) bool { return l.Owner == owner })
	if len(freed) == 0 {
		return nil, nil
	}
	if err := a.saveLocked(); err != nil {
		a.restoreLocked(freed)
		return nil, fmt.Errorf("release ports: %w", err)
	}
	return leasePorts(freed), nil
}

// Touch confirms that owner still runs, restarting the TTL of its ports. It
// changes memory only, so it cannot fail; an owner holding nothing is
// ignored.
func (a *PortAllocator) Touch(owner string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	for p, l := range a.held {
		if l.Owner == owner {
			l.Confirmed = now
			a.held[p] = l
		}
	}
}

// Recover is called once after an agent restart with the attempts still
// running: their ports stay held (confirmed now) and every other port is
// freed. It returns the freed leases, or an error, changing nothing, when
// the state file cannot be written.
func (a *PortAllocator) Recover(running []string) ([]PortLease, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	freed := a.dropLocked(func(l PortLease) bool { return !slices.Contains(running, l.Owner) })
	for p, l := range a.held {
		l.Confirmed = now
		a.held[p] = l
	}
	if len(freed) == 0 {
		return nil, nil
	}
	if err := a.saveLocked(); err != nil {
		a.restoreLocked(freed)
		return nil, fmt.Errorf("recover ports: %w", err)
	}
	return freed, nil
}

// Reclaim frees the ports whose owner was last confirmed more than TTL
// before now, and returns them. It returns an error, freeing nothing, when
// the state file cannot be written.
func (a *PortAllocator) Reclaim(now time.Time) ([]PortLease, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	freed := a.dropLocked(func(l PortLease) bool { return now.Sub(l.Confirmed) > a.ttl })
	if len(freed) == 0 {
		return nil, nil
	}
	if err := a.saveLocked(); err != nil {
		a.restoreLocked(freed)
		return nil, fmt.Errorf("reclaim ports: %w", err)
	}
	return freed, nil
}

// Ports returns the ports owner holds, in increasing order. It cannot fail.
func (a *PortAllocator) Ports(owner string) []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []int
	for p, l := range a.held {
		if l.Owner == owner {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// Held returns every held port, by port. It cannot fail.
func (a *PortAllocator) Held() []PortLease {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.leasesLocked()
}

func (a *PortAllocator) leasesLocked() []PortLease {
	out := make([]PortLease, 0, len(a.held))
	for _, l := range a.held {
		out = append(out, l)
	}
	slices.SortFunc(out, func(x, y PortLease) int { return x.Port - y.Port })
	return out
}

// dropLocked removes the leases match selects and returns them.
func (a *PortAllocator) dropLocked(match func(PortLease) bool) []PortLease {
	var out []PortLease
	for p, l := range a.held {
		if match(l) {
			out = append(out, l)
			delete(a.held, p)
		}
	}
	slices.SortFunc(out, func(x, y PortLease) int { return x.Port - y.Port })
	return out
}

func (a *PortAllocator) restoreLocked(leases []PortLease) {
	for _, l := range leases {
		a.held[l.Port] = l
	}
}

// saveLocked replaces the state file with the held ports.
func (a *PortAllocator) saveLocked() error {
	if a.path == "" {
		return nil
	}
	data, err := json.Marshal(portFile{Version: 1, Leases: a.leasesLocked()})
	if err != nil {
		return err
	}
	return replaceFile(a.path, data, 0o644)
}

func leasePorts(leases []PortLease) []int {
	out := make([]int, len(leases))
	for i, l := range leases {
		out[i] = l.Port
	}
	return out
}
