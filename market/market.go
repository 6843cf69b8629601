// Package market is a seeded, simulated GPU marketplace in virtual time,
// and three provisioning strategies driven through it: Berth's (the cloud
// package's Query, Rank and Record, with host records kept across runs,
// and a budget per readiness phase), SkyPilot's (the cheapest offer, one
// replacement excluding the failed machine, a 30-minute wait) and
// dstack's (up to 25 offers by score, no memory across runs, a 10-minute
// provisioning timeout). Compare measures, per strategy, the rented
// minutes wasted per ready instance, the time to ready and the failed
// provisions (docs/performance.md, "Rented GPUs: provisioning
// strategies"). Everything is a function of the seed: the machines, their
// faults, which are listed in each run and how long each boot takes.
package market

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/cloud"
)

// Fault is what is wrong with a machine, the same on every rental of it.
type Fault string

// Faults. Each but FaultStall shows at a point of the instance's boot;
// a stalled instance just never becomes ready.
const (
	FaultNone   Fault = ""
	FaultCreate Fault = "create" // the container never starts: an OCI/CDI error in status_msg
	FaultSSH    Fault = "ssh"    // SSH answers Permission denied (publickey)
	FaultGPU    Fault = "gpu"    // the GPU check over SSH fails (no libcuda)
	FaultStall  Fault = "stall"  // the workload's warm-up never finishes
	FaultVanish Fault = "vanish" // the instance disappears before it is ready
)

// Faults lists the faults a Mix may name, in the order of a boot.
var Faults = []Fault{FaultCreate, FaultSSH, FaultGPU, FaultStall, FaultVanish}

// Mix is the share of machines with each fault; the rest are sound.
type Mix map[Fault]float64

// DefaultMix is the mix `berth sim market` uses unless told otherwise:
// 18% of machines are bad in one way.
var DefaultMix = Mix{FaultCreate: 0.04, FaultSSH: 0.04, FaultGPU: 0.03, FaultStall: 0.04, FaultVanish: 0.03}

// ParseMix reads a mix written as "create=0.04,ssh=0.04,…" (faults not
// named: none) or "none".
func ParseMix(s string) (Mix, error) {
	m := Mix{}
	if s = strings.TrimSpace(s); s == "none" || s == "" {
		return m, nil
	}
	var sum float64
	for _, part := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		f := Fault(strings.TrimSpace(name))
		if !ok || !slices.Contains(Faults, f) {
			return nil, fmt.Errorf("%q: want FAULT=SHARE with FAULT one of create, ssh, gpu, stall, vanish", part)
		}
		if _, dup := m[f]; dup {
			return nil, fmt.Errorf("%s is named twice", f)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || !(v >= 0 && v <= 1) {
			return nil, fmt.Errorf("%s=%s: the share must be a number from 0 to 1", f, val)
		}
		m[f] = v
		sum += v
	}
	if sum > 1 {
		return nil, fmt.Errorf("the shares add up to %g, more than 1", sum)
	}
	return m, nil
}

// String writes m as ParseMix reads it.
func (m Mix) String() string {
	var parts []string
	for _, f := range Faults {
		if m[f] > 0 {
			parts = append(parts, fmt.Sprintf("%s=%g", f, m[f]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

// The marketplace's machines, as generated: one GPU model, prices from
// 0.25 to 0.70 $/h, reliability from 0.90 to 1 (most near 1), 80%
// verified, 90% with direct ports. Machines that are unverified or below
// 0.95 reliability are 1.5 times as likely as the mix says to have a
// fault (at most certain), the others less likely, so that the mix holds
// over the market; which fault is drawn by the mix's shares.
const (
	gpuName      = "RTX 4090"
	pVerified    = 0.8
	pDirectPorts = 0.9
	badWeight    = 1.5
)

// pLow is the share of machines that are unverified or below 0.95
// reliability (reliability is 1 - 0.1·u², u uniform).
var pLow = (1 - pVerified) + pVerified*(1-math.Sqrt(0.5))

// machine is one of the marketplace's machines.
type machine struct {
	offer cloud.Offer
	fault Fault
}

// marketplace is the market of one seed: its machines, which come and
// go between runs, and the boot of every rental.
type marketplace struct {
	seed     uint64
	mix      Mix
	machines []*machine
	nextID   int64
	// listed and listedBad are the chances that a sound and a faulty
	// machine are listed in a run (not rented by someone else); churn the
	// chance that a machine leaves the market before a run, replaced by a
	// new one.
	listed, listedBad, churn float64
}

// newMarket generates n machines from seed.
func newMarket(seed uint64, n int, mix Mix) *marketplace {
	m := &marketplace{seed: seed, mix: mix, nextID: 1001, listed: 0.5, listedBad: 0.8, churn: 0.02}
	rng := m.rng(0, 0)
	for range n {
		m.machines = append(m.machines, m.newMachine(rng))
	}
	return m
}

// rng returns the random source for one purpose: the same (a, b) gives the
// same numbers, so every strategy sees the same market.
func (m *marketplace) rng(a, b uint64) *rand.Rand {
	return rand.New(rand.NewPCG(m.seed, a<<32^b))
}

// newMachine draws a machine and its fault.
func (m *marketplace) newMachine(rng *rand.Rand) *machine {
	id := m.nextID
	m.nextID++
	u := rng.Float64()
	o := cloud.Offer{
		ID:            id * 10,
		MachineID:     id,
		HostID:        id,
		GPUName:       gpuName,
		NumGPUs:       1,
		GPURAMMB:      24564,
		PricePerHour:  math.Round((0.25+0.45*rng.Float64())*100) / 100,
		Reliability:   1 - 0.1*u*u,
		Verified:      rng.Float64() < pVerified,
		InetDownMbps:  math.Round(50 + 950*rng.Float64()),
		CUDAMaxGood:   []float64{11.8, 12.2, 12.4}[rng.IntN(3)],
		DriverVersion: []string{"535.183.01", "550.120", "560.35.03"}[rng.IntN(3)],
	}
	if rng.Float64() < pDirectPorts {
		o.DirectPorts = 1 + rng.IntN(8)
	}
	o.Score = math.Round(o.Reliability*100/o.PricePerHour*10) / 10
	var total float64
	for _, f := range Faults {
		total += m.mix[f]
	}
	low := min(1, total*badWeight)
	p := (total - pLow*low) / (1 - pLow)
	if !o.Verified || o.Reliability < 0.95 {
		p = low
	}
	fault := FaultNone
	if rng.Float64() < p {
		r := rng.Float64() * total
		for _, f := range Faults {
			if m.mix[f] == 0 {
				continue
			}
			if fault = f; r < m.mix[f] {
				break
			}
			r -= m.mix[f]
		}
	}
	return &machine{offer: o, fault: fault}
}

// startRun replaces the machines that leave before run.
func (m *marketplace) startRun(run int) {
	rng := m.rng(uint64(run)+1, 0)
	for i := range m.machines {
		if rng.Float64() < m.churn {
			m.machines[i] = m.newMachine(rng)
		}
	}
}

// offers returns run's listing: the machines listed in it, by machine id.
func (m *marketplace) offers(run int) []*machine {
	var out []*machine
	for _, mc := range m.machines {
		p := m.listed
		if mc.fault != FaultNone {
			p = m.listedBad
		}
		if m.rng(uint64(run)+1, uint64(mc.offer.MachineID)<<1).Float64() < p {
			out = append(out, mc)
		}
	}
	return out
}

// search returns the offers of run's listing that q selects, cheapest
// first, at most q.Limit.
func (m *marketplace) search(run int, q cloud.OfferQuery) []cloud.Offer {
	var out []cloud.Offer
	for _, mc := range m.offers(run) {
		o := mc.offer
		if o.GPUName != q.GPUName || o.NumGPUs < q.GPUs || q.MaxPricePerHour > 0 && o.PricePerHour > q.MaxPricePerHour ||
			o.Reliability < q.MinReliability || q.Verified && !o.Verified || o.DirectPorts < q.MinDirectPorts ||
			o.InetDownMbps < q.MinInetDownMbps || o.CUDAMaxGood < q.MinCUDA || slices.Contains(q.ExcludeMachines, o.MachineID) {
			continue
		}
		out = append(out, o)
	}
	slices.SortStableFunc(out, func(a, b cloud.Offer) int { return cmp.Compare(a.PricePerHour, b.PricePerHour) })
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out
}

// fault returns the fault of machine id (a machine of the market).
func (m *marketplace) fault(id int64) Fault {
	for _, mc := range m.machines {
		if mc.offer.MachineID == id {
			return mc.fault
		}
	}
	return FaultNone
}

// Boot-time distribution, from the create call: the container starts
// after a log-normal time (median 60 s, image pull included), SSH answers
// 5–20 s later, the GPU check takes 2–10 s and the agent registers after a
// log-normal warm-up (median 30 s). Each is capped (4 min, 4 min) so that
// a sound machine is ready within every strategy's budgets: faults alone
// waste money.
const (
	bootMedian, bootCap = 60 * time.Second, 4 * time.Minute
	warmMedian, warmCap = 30 * time.Second, 4 * time.Minute
)

// boot is one rental's timeline, from its create call.
type boot struct {
	running, ssh, gpuOK, ready time.Duration
	vanish                     time.Duration // when it disappears (FaultVanish)
	fault                      Fault
}

// bootOf draws the boot of machine id in run: the same for every
// strategy that rents it then.
func (m *marketplace) bootOf(run int, id int64) boot {
	rng := m.rng(uint64(run)+1, uint64(id)<<1|1)
	logNormal := func(median time.Duration, sigma float64, limit time.Duration) time.Duration {
		return min(time.Duration(float64(median)*math.Exp(sigma*rng.NormFloat64())), limit).Round(time.Second)
	}
	var b boot
	b.running = logNormal(bootMedian, 0.6, bootCap)
	b.ssh = b.running + time.Duration(5+rng.IntN(16))*time.Second
	b.gpuOK = b.ssh + time.Duration(2+rng.IntN(9))*time.Second
	b.ready = b.gpuOK + logNormal(warmMedian, 0.8, warmCap)
	b.vanish = time.Duration(rng.Int64N(int64(b.ready)))
	b.fault = m.fault(id)
	return b
}
