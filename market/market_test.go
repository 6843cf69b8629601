package market

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/cloud"
)

func TestCompareIsDeterministic(t *testing.T) {
	t.Parallel()
	cfg := Config{Seed: 7, Markets: 3, Runs: 20, Machines: 40, Mix: DefaultMix, Strictness: berth.StrictnessBalanced}
	a, b := Compare(cfg), Compare(cfg)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("the same seed gave two reports:\n%+v\n%+v", a, b)
	}
	if len(a.Results) != len(Strategies) {
		t.Fatalf("%d results, want one per strategy", len(a.Results))
	}
	cfg.Seed = 8
	if c := Compare(cfg); reflect.DeepEqual(a.Results, c.Results) {
		t.Errorf("seeds 7 and 8 gave the same results: the seed is not used")
	}
}

func TestNoFaultsWasteNothing(t *testing.T) {
	t.Parallel()
	for _, s := range []berth.Strictness{berth.StrictnessStrict, berth.StrictnessBalanced, berth.StrictnessAggressive} {
		rep := Compare(Config{Seed: 3, Markets: 4, Runs: 25, Machines: 50, Mix: Mix{}, Strictness: s})
		for _, r := range rep.Results {
			// Every rental becomes ready (a strict pool may find no offer
			// in a run: a failed provision without a rental).
			if r.WastedMinutes != 0 || r.WastedDollars != 0 || r.Rentals != r.Ready || r.Ready+r.FailedProvisions != 100 || len(r.Faults) != 0 {
				t.Errorf("%s, %s, no faults: %+v", s, r.Strategy, r)
			}
			if r.Ready < 90 {
				t.Errorf("%s, %s, no faults: only %d of 100 runs ready", s, r.Strategy, r.Ready)
			}
			if !(r.TimeToReadyP50 > 0 && r.TimeToReadyP50 <= r.TimeToReadyP90 && r.TimeToReadyP90 <= r.TimeToReadyMax) {
				t.Errorf("%s, %s: time to ready p50 %g p90 %g max %g", s, r.Strategy, r.TimeToReadyP50, r.TimeToReadyP90, r.TimeToReadyMax)
			}
		}
	}
}

func TestEveryMachineBadNothingIsReady(t *testing.T) {
	t.Parallel()
	rep := Compare(Config{Seed: 5, Markets: 2, Runs: 5, Machines: 30, Mix: Mix{FaultSSH: 1}, Strictness: berth.StrictnessAggressive})
	for _, r := range rep.Results {
		if r.Ready != 0 || r.FailedProvisions != 10 || r.WastedMinutes <= 0 || r.WastedMinutesPerReady != r.WastedMinutes {
			t.Errorf("%s, every machine refusing the key: %+v", r.Strategy, r)
		}
	}
}

// twoMachines is a market of a cheap machine with fault and a dearer
// sound one, both always listed.
func twoMachines(fault Fault) *marketplace {
	offer := func(id int64, price float64) cloud.Offer {
		return cloud.Offer{ID: id * 10, MachineID: id, GPUName: gpuName, NumGPUs: 1, PricePerHour: price, Reliability: 0.99,
			Verified: true, DirectPorts: 2, InetDownMbps: 500, CUDAMaxGood: 12.4, DriverVersion: "550.120", Score: 99 / price}
	}
	return &marketplace{seed: 1, listed: 1, listedBad: 1, machines: []*machine{
		{offer: offer(1, 0.30), fault: fault},
		{offer: offer(2, 0.50)},
	}}
}

func TestBerthRemembersABadMachine(t *testing.T) {
	t.Parallel()
	m := twoMachines(FaultSSH)
	p := pool(berth.StrictnessBalanced)
	hosts := map[int64]*berth.HostRecord{}
	first := m.runBerth(0, epoch, p, hosts)
	if !first.ready || first.attempts != 2 || first.faults[FaultSSH] != 1 || first.wasted <= 0 {
		t.Fatalf("first run: %+v, want the cheap machine tried, refused, then the other ready", first)
	}
	if h := hosts[1]; h == nil || h.Failures[berth.FailureInfraFatal] != 1 || cloud.Usable(h, epoch.Add(runGap)) {
		t.Fatalf("the refusing machine's record: %+v, want quarantined", h)
	}
	if hosts[2].Successes != 1 {
		t.Errorf("the sound machine's record: %+v", hosts[2])
	}
	// An hour later (quarantined) and a day later (quarantine over, but
	// suspect), Berth goes to the sound machine at once.
	for _, at := range []time.Duration{runGap, 24 * runGap} {
		r := m.runBerth(1, epoch.Add(at), p, hosts)
		if !r.ready || r.attempts != 1 || len(r.faults) != 0 || r.wasted != 0 {
			t.Errorf("run %v later: %+v, want the sound machine at once", at, r)
		}
	}
	// Without memory, dstack pays for the bad machine every run.
	for run := range 2 {
		if r := m.runDstack(run, p); r.attempts != 2 || r.faults[FaultSSH] != 1 {
			t.Errorf("dstack, run %d: %+v, want the bad machine tried again", run, r)
		}
	}
}

func TestSkyPilotTriesOneReplacement(t *testing.T) {
	t.Parallel()
	m := twoMachines(FaultCreate)
	m.machines[1].fault = FaultGPU
	r := m.runSkyPilot(0, pool(berth.StrictnessBalanced))
	if r.ready || r.attempts != 2 || r.wasted != 2*skyPilotWait {
		t.Errorf("SkyPilot on two bad machines: %+v, want two 30-minute waits and no instance", r)
	}
}

func TestWaiters(t *testing.T) {
	t.Parallel()
	b := boot{running: 61 * time.Second, ssh: 75 * time.Second, gpuOK: 80 * time.Second, ready: 111 * time.Second, vanish: 33 * time.Second}
	for _, tc := range []struct {
		fault Fault
		w     string
		want  outcome
	}{
		{FaultNone, StrategyBerth, outcome{ready: true, end: 120 * time.Second}},
		{FaultNone, StrategySkyPilot, outcome{ready: true, end: 120 * time.Second}},
		{FaultCreate, StrategyBerth, outcome{end: 70 * time.Second, class: berth.FailureInfraFatal}},
		{FaultCreate, StrategySkyPilot, outcome{end: skyPilotWait, class: berth.FailureUnknown}},
		{FaultCreate, StrategyDstack, outcome{end: 70 * time.Second, class: berth.FailureInfraFatal}},
		{FaultSSH, StrategyBerth, outcome{end: 80 * time.Second, class: berth.FailureInfraFatal}},
		{FaultSSH, StrategyDstack, outcome{end: dstackTimeout, class: berth.FailureUnknown}},
		{FaultGPU, StrategyBerth, outcome{end: 80 * time.Second, class: berth.FailureInfraFatal}},
		{FaultGPU, StrategySkyPilot, outcome{end: skyPilotWait, class: berth.FailureUnknown}},
		{FaultStall, StrategyBerth, outcome{end: 80*time.Second + berthWarmup, class: berth.FailureWarmup}},
		{FaultStall, StrategyDstack, outcome{end: dstackTimeout, class: berth.FailureUnknown}},
		{FaultVanish, StrategyBerth, outcome{end: 40 * time.Second, class: berth.FailureInfraFatal}},
		{FaultVanish, StrategySkyPilot, outcome{end: 40 * time.Second, class: berth.FailureInfraFatal}},
	} {
		w := map[string]waiter{StrategyBerth: berthWaiter, StrategySkyPilot: skyPilotWaiter, StrategyDstack: dstackWaiter}[tc.w]
		b := b
		b.fault = tc.fault
		if got := w.try(b); got != tc.want {
			t.Errorf("%s, fault %q: %+v, want %+v", tc.w, tc.fault, got, tc.want)
		}
	}
	// A container that takes longer than Berth's budget to start.
	slow := boot{running: 6 * time.Minute, ssh: 7 * time.Minute, gpuOK: 8 * time.Minute, ready: 9 * time.Minute}
	if got, want := berthWaiter.try(slow), (outcome{end: berthContainer, class: berth.FailureInfraFatal}); got != want {
		t.Errorf("Berth, slow container: %+v, want %+v", got, want)
	}
}

func TestGeneratedMarketHoldsTheMix(t *testing.T) {
	t.Parallel()
	m := newMarket(11, 40000, DefaultMix)
	counts := map[Fault]int{}
	for _, mc := range m.machines {
		counts[mc.fault]++
		if o := mc.offer; o.PricePerHour < 0.25 || o.PricePerHour > 0.70 || o.Reliability <= 0.9 || o.Reliability > 1 {
			t.Fatalf("machine out of range: %+v", o)
		}
	}
	for _, f := range Faults {
		if got := float64(counts[f]) / 40000; math.Abs(got-DefaultMix[f]) > 0.005 {
			t.Errorf("fault %s: share %.4f, want %.2f", f, got, DefaultMix[f])
		}
	}
}

func TestParseMix(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"none", "create=0.04,ssh=0.04,gpu=0.03,stall=0.04,vanish=0.03", "stall=1"} {
		m, err := ParseMix(s)
		if err != nil {
			t.Errorf("ParseMix(%q): %v", s, err)
		} else if m.String() != s {
			t.Errorf("ParseMix(%q).String() = %q", s, m.String())
		}
	}
	if DefaultMix.String() != "create=0.04,ssh=0.04,gpu=0.03,stall=0.04,vanish=0.03" {
		t.Errorf("DefaultMix = %s", DefaultMix)
	}
	for _, s := range []string{"melt=0.1", "ssh", "ssh=x", "ssh=-0.1", "ssh=1.5", "ssh=0.6,gpu=0.6", "ssh=0.1,ssh=0.2", "ssh=NaN"} {
		if _, err := ParseMix(s); err == nil {
			t.Errorf("ParseMix(%q) took it", s)
		}
	}
}
