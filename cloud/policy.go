package cloud

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/berth-dev/berth"
)

// The strictness policies, as docs/pools.md ("Strictness and host
// reputation") tables them: the offer filters Query asks for, how long
// Record quarantines a machine after an infra-fatal failure, and how many
// workload-fatal failures mark a GPU model or driver as a bad class for
// Rank.
type policy struct {
	minReliability float64
	verified       bool
	minDirectPorts int
	minInetDown    float64
	minCUDA        float64
	quarantine     time.Duration // the first; doubled on each repeat
	classFailures  int           // workload-fatal failures that down-rank a GPU model or driver
	historyFirst   bool          // proven hosts before unknown ones; false: the two by price
}

var policies = map[berth.Strictness]policy{
	berth.StrictnessStrict: {minReliability: 0.98, verified: true, minDirectPorts: 1, minInetDown: 200, minCUDA: 12.0,
		quarantine: 24 * time.Hour, classFailures: 2, historyFirst: true},
	berth.StrictnessBalanced: {minReliability: 0.95, verified: true, minDirectPorts: 1, minInetDown: 100,
		quarantine: 6 * time.Hour, classFailures: 3, historyFirst: true},
	berth.StrictnessAggressive: {minReliability: 0.90,
		quarantine: time.Hour, classFailures: 3},
}

// policyOf returns strictness s's policy; an empty or unknown strictness
// is balanced.
func policyOf(s berth.Strictness) policy {
	if p, ok := policies[s]; ok {
		return p
	}
	return policies[berth.StrictnessBalanced]
}

const (
	// MaxQuarantine caps a machine's quarantine, however often it failed.
	MaxQuarantine = 30 * 24 * time.Hour
	// SuspectFor is how long after its quarantine ended a machine still
	// ranks below machines that never failed for their host's fault,
	// unless it has succeeded since.
	SuspectFor = 7 * 24 * time.Hour
	// QueryLimit is how many offers Query asks for: Rank orders them.
	QueryLimit = 64
)

// Query returns the offer query for one instance of pool: its GPU model
// and count, the filters of its strictness, machines in exclude left out
// (sorted, without repeats), cheapest first. left is the $/h still free
// under the pool's cap (pool.MaxPrice is for the whole pool, counted over
// its starting and ready instances): an offer may cost at most that. The
// caller rents nothing when left is not positive; Query then still never
// asks for "any price", but for a price no offer has.
func Query(pool *berth.Pool, left float64, exclude []int64) OfferQuery {
	p := policyOf(pool.Strictness)
	price := left
	if pool.MaxPrice > 0 {
		price = math.Min(price, pool.MaxPrice)
	}
	if !(price > 0) {
		price = math.SmallestNonzeroFloat64
	}
	ex := slices.Clone(exclude)
	slices.Sort(ex)
	ex = slices.Compact(ex)
	return OfferQuery{
		GPUName:         pool.GPUType,
		GPUs:            pool.GPUs,
		MaxPricePerHour: price,
		MinReliability:  p.minReliability,
		Verified:        p.verified,
		MinDirectPorts:  p.minDirectPorts,
		MinInetDownMbps: p.minInetDown,
		MinCUDA:         p.minCUDA,
		ExcludeMachines: ex,
		OrderBy:         "dph_total asc",
		Limit:           QueryLimit,
	}
}

// Usable reports whether machine h may be rented now: not blocked by
// hand and not quarantined. A machine without a record (nil) is usable.
func Usable(h *berth.HostRecord, now time.Time) bool {
	return h == nil || !h.Blocked && !now.Before(h.QuarantinedUntil)
}

// Record counts one outcome on machine h at now: class "" is a success
// (an instance became ready), any other class a failure of that class.
// An infra-fatal failure quarantines the machine for strictness s's
// quarantine, doubled for each infra-fatal failure it had before, at most
// MaxQuarantine; a quarantine only ever grows. A success ends a quarantine
// that has expired, so the machine is no longer suspect to Rank.
// Workload-fatal failures do not blame the machine, but Rank counts them
// against its GPU model and driver.
func Record(h *berth.HostRecord, s berth.Strictness, class string, now time.Time) {
	h.LastSeen = now
	if class == "" {
		h.Successes++
		if !now.Before(h.QuarantinedUntil) {
			h.QuarantinedUntil = time.Time{}
		}
		return
	}
	if h.Failures == nil {
		h.Failures = map[string]int{}
	}
	h.Failures[class]++
	h.LastFailure = class
	if class != berth.FailureInfraFatal {
		return
	}
	d := policyOf(s).quarantine
	for i := 1; i < h.Failures[class] && d < MaxQuarantine; i++ {
		d *= 2
	}
	if until := now.Add(min(d, MaxQuarantine)); until.After(h.QuarantinedUntil) {
		h.QuarantinedUntil = until
	}
}

// Ranks of an offer's machine, best first.
const (
	rankProven  = iota // succeeded before, no infra-fatal failure since
	rankUnknown        // no history that speaks for or against it
	rankSuspect        // its quarantine ended less than SuspectFor ago, or it only ever failed
)

// rankOf returns the rank of machine h at now (usable).
func rankOf(h *berth.HostRecord, p policy, now time.Time) int {
	switch {
	case h == nil:
		return rankUnknown
	case !h.QuarantinedUntil.IsZero() && now.Sub(h.QuarantinedUntil) < SuspectFor:
		return rankSuspect
	case h.Successes > 0:
		if p.historyFirst {
			return rankProven
		}
		return rankUnknown
	}
	for class, n := range h.Failures {
		if n > 0 && class != berth.FailureWorkloadFatal {
			return rankSuspect
		}
	}
	return rankUnknown
}

// Rank orders offers for renting under strictness s, given the machines'
// records (by machine id) at now: machines that are blocked or
// quarantined are left out; offers of a GPU model or driver whose
// machines had the policy's number of workload-fatal failures (counted
// over all records) come after all others; then machines that succeeded
// before and have not failed for their own fault since, then machines
// without history (workload-fatal failures do not count against a
// machine), then machines whose quarantine ended less than SuspectFor ago
// or that never succeeded but failed (a warm-up that ran out of budget,
// say); aggressive ranks the first two together. Within each, cheapest
// first, then by machine and offer id. offers is not changed.
func Rank(offers []Offer, hosts map[int64]*berth.HostRecord, s berth.Strictness, now time.Time) []Offer {
	p := policyOf(s)
	badGPU, badDriver := map[string]int{}, map[string]int{}
	for _, h := range hosts {
		if n := h.Failures[berth.FailureWorkloadFatal]; n > 0 {
			if h.GPUName != "" {
				badGPU[h.GPUName] += n
			}
			if h.Driver != "" {
				badDriver[h.Driver] += n
			}
		}
	}
	type ranked struct {
		Offer
		bad  bool
		rank int
	}
	var rs []ranked
	for _, o := range offers {
		h := hosts[o.MachineID]
		if !Usable(h, now) {
			continue
		}
		bad := badGPU[o.GPUName] >= p.classFailures || badDriver[o.DriverVersion] >= p.classFailures
		rs = append(rs, ranked{Offer: o, bad: bad, rank: rankOf(h, p, now)})
	}
	slices.SortStableFunc(rs, func(a, b ranked) int {
		switch {
		case a.bad != b.bad:
			if a.bad {
				return 1
			}
			return -1
		case a.rank != b.rank:
			return a.rank - b.rank
		case a.PricePerHour != b.PricePerHour:
			return cmp.Compare(a.PricePerHour, b.PricePerHour)
		case a.MachineID != b.MachineID:
			return cmp.Compare(a.MachineID, b.MachineID)
		}
		return cmp.Compare(a.ID, b.ID)
	})
	out := make([]Offer, len(rs))
	for i, r := range rs {
		out[i] = r.Offer
	}
	return out
}
