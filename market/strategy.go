package market

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/cloud"
)

// Strategy names, in the order Compare reports them. Berth's without
// memory is Berth's with its host records forgotten after each run: what
// the records buy, apart from the filters and the failure detection.
const (
	StrategyBerth         = "berth"
	StrategyBerthNoMemory = "berth-nomemory"
	StrategySkyPilot      = "skypilot"
	StrategyDstack        = "dstack"
)

// Strategies are the strategies Compare runs.
var Strategies = []string{StrategyBerth, StrategyBerthNoMemory, StrategySkyPilot, StrategyDstack}

// How the strategies wait, as their sources do (docs/performance.md):
// every strategy polls the instance every 10 s.
const (
	poll = 10 * time.Second
	// Berth's budgets, one per readiness phase, and how many offers it
	// tries in one run.
	berthContainer, berthSSH, berthGPU, berthWarmup = 5 * time.Minute, 3 * time.Minute, time.Minute, 10 * time.Minute
	berthAttempts                                   = 10
	// SkyPilot waits up to 30 min for an instance, then tries one
	// replacement, excluding the machine that failed.
	skyPilotWait, skyPilotAttempts = 30 * time.Minute, 2
	// dstack tries up to 25 offers by score, each for up to 10 min.
	dstackTimeout, dstackOffers = 10 * time.Minute, 25
)

// never is a time no boot reaches.
const never = time.Duration(math.MaxInt64)

// signal returns when b's fault shows to one that looks for it: the
// OCI/CDI error when the container would have started, the refused key
// when SSH would have answered, the failed check when the GPU would have
// passed it, the disappearance; never for a stall or no fault.
func (b boot) signal() time.Duration {
	switch b.fault {
	case FaultCreate:
		return b.running
	case FaultSSH:
		return b.ssh
	case FaultGPU:
		return b.gpuOK
	case FaultVanish:
		return b.vanish
	}
	return never
}

// seen rounds t up to the poll that sees it.
func seen(t time.Duration) time.Duration {
	if t == never {
		return never
	}
	return (t + poll - 1) / poll * poll
}

// outcome is how one rental ended: ready, or failed (class) at end, from
// its create call.
type outcome struct {
	ready bool
	end   time.Duration
	class string
}

// waiter is how a strategy waits for one instance: the faults it tells
// apart as they show, and when it gives up on b (and the failure class
// it then records).
type waiter struct {
	sees     []Fault
	deadline func(b boot) (time.Duration, string)
}

// try rents through b as w waits.
func (w waiter) try(b boot) outcome {
	deadline, class := w.deadline(b)
	if b.fault == FaultNone && seen(b.ready) <= deadline {
		return outcome{ready: true, end: seen(b.ready)}
	}
	if slices.Contains(w.sees, b.fault) && seen(b.signal()) <= deadline {
		return outcome{end: seen(b.signal()), class: berth.FailureInfraFatal}
	}
	return outcome{end: deadline, class: class}
}

// berthWaiter tells every fault that shows from the others at once
// (status_msg, the SSH error, the GPU check, the instance gone) and
// gives each readiness phase its own budget: running out of a budget
// before the agent's warm-up is infra-fatal, running out of warm-up is a
// warm-up failure.
var berthWaiter = waiter{
	sees: []Fault{FaultCreate, FaultSSH, FaultGPU, FaultVanish},
	deadline: func(b boot) (time.Duration, string) {
		ready := b.ready
		if b.fault == FaultStall {
			ready = never
		}
		switch {
		case b.running > berthContainer:
			return berthContainer, berth.FailureInfraFatal
		case b.ssh-b.running > berthSSH:
			return b.running + berthSSH, berth.FailureInfraFatal
		case b.gpuOK-b.ssh > berthGPU:
			return b.ssh + berthGPU, berth.FailureInfraFatal
		case ready-b.gpuOK > berthWarmup:
			return b.gpuOK + berthWarmup, berth.FailureWarmup
		}
		return never, ""
	},
}

// skyPilotWaiter fails fast only on the states an instance that is gone
// shows (OFFLINE, EXITED…): an instance stuck in "created" with an error
// in status_msg, an SSH key refused or a missing GPU library waits out
// the 30 minutes.
var skyPilotWaiter = waiter{
	sees:     []Fault{FaultVanish},
	deadline: func(boot) (time.Duration, string) { return skyPilotWait, berth.FailureUnknown },
}

// dstackWaiter also reads "OCI runtime create failed" in status_msg; the
// rest waits out the 10-minute provisioning timeout.
var dstackWaiter = waiter{
	sees:     []Fault{FaultCreate, FaultVanish},
	deadline: func(boot) (time.Duration, string) { return dstackTimeout, berth.FailureUnknown },
}

// runResult is one provisioning run of one strategy.
type runResult struct {
	ready    bool
	toReady  time.Duration // when ready: from the run's start
	wasted   time.Duration // billed time of the rentals that never became ready
	dollars  float64       // what that time cost
	attempts int
	faults   map[Fault]int // the rentals that hit each fault
}

// rent adds one rental to r: machine o booting as b, waited for by w.
func (r *runResult) rent(o cloud.Offer, b boot, w waiter) outcome {
	out := w.try(b)
	r.attempts++
	if b.fault != FaultNone {
		r.faults[b.fault]++
	}
	if out.ready {
		r.ready, r.toReady = true, r.toReady+out.end
	} else {
		r.toReady += out.end
		r.wasted += out.end
		r.dollars += out.end.Hours() * o.PricePerHour
	}
	return out
}

// pool is the pool every strategy provisions for: one RTX 4090 at up to
// 0.60 $/h.
func pool(s berth.Strictness) *berth.Pool {
	return &berth.Pool{Name: "sim", Provider: "sim", GPUType: gpuName, GPUs: 1, MaxInstances: 1, MaxPrice: 0.60, Strictness: s}
}

// runBerth provisions one instance in run, started at start, the way
// Berth does: Query with the pool's strictness, Rank by the host records
// in hosts (kept across runs), the best offer, Record the outcome; the
// machines that failed in this run are excluded from its next queries.
func (m *marketplace) runBerth(run int, start time.Time, p *berth.Pool, hosts map[int64]*berth.HostRecord) runResult {
	r := runResult{faults: map[Fault]int{}}
	var exclude []int64
	for range berthAttempts {
		ranked := cloud.Rank(m.search(run, cloud.Query(p, p.MaxPrice, exclude)), hosts, p.Strictness, start.Add(r.toReady))
		if len(ranked) == 0 {
			break
		}
		o := ranked[0]
		out := r.rent(o, m.bootOf(run, o.MachineID), berthWaiter)
		h := hosts[o.MachineID]
		if h == nil {
			h = &berth.HostRecord{Provider: "sim", MachineID: o.MachineID, GPUName: o.GPUName, Driver: o.DriverVersion}
			hosts[o.MachineID] = h
		}
		cloud.Record(h, p.Strictness, out.class, start.Add(r.toReady))
		if out.ready {
			break
		}
		exclude = append(exclude, o.MachineID)
	}
	return r
}

// runSkyPilot provisions one instance in run the way SkyPilot does: the
// cheapest offer; when it fails, one replacement, the failed machine
// excluded. Nothing is remembered across runs.
func (m *marketplace) runSkyPilot(run int, p *berth.Pool) runResult {
	r := runResult{faults: map[Fault]int{}}
	q := cloud.OfferQuery{GPUName: p.GPUType, GPUs: p.GPUs, MaxPricePerHour: p.MaxPrice}
	for range skyPilotAttempts {
		offers := m.search(run, q)
		if len(offers) == 0 {
			break
		}
		if r.rent(offers[0], m.bootOf(run, offers[0].MachineID), skyPilotWaiter).ready {
			break
		}
		q.ExcludeMachines = append(q.ExcludeMachines, offers[0].MachineID)
	}
	return r
}

// runDstack provisions one instance in run the way dstack does: up to 25
// offers by the marketplace's score, in turn. Nothing is remembered
// across runs.
func (m *marketplace) runDstack(run int, p *berth.Pool) runResult {
	r := runResult{faults: map[Fault]int{}}
	offers := m.search(run, cloud.OfferQuery{GPUName: p.GPUType, GPUs: p.GPUs, MaxPricePerHour: p.MaxPrice})
	slices.SortStableFunc(offers, func(a, b cloud.Offer) int { return cmp.Compare(b.Score, a.Score) })
	for _, o := range offers[:min(len(offers), dstackOffers)] {
		if r.rent(o, m.bootOf(run, o.MachineID), dstackWaiter).ready {
			break
		}
	}
	return r
}
