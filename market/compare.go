package market

import (
	"math"
	"slices"
	"time"

	"github.com/berth-dev/berth"
)

// Config is one comparison: how many markets (seeds Seed, Seed+1, …),
// their size and fault mix, how many provisioning runs each strategy
// makes in each (an hour apart; Berth's host records last a market's
// runs), and the strictness of Berth's pool.
type Config struct {
	Seed       uint64           `json:"seed"`
	Markets    int              `json:"markets"`
	Runs       int              `json:"runs"`
	Machines   int              `json:"machines"`
	Mix        Mix              `json:"-"`
	Strictness berth.Strictness `json:"strictness"`
}

// Report is what Compare found.
type Report struct {
	Config
	Faults  string   `json:"faults"` // Config.Mix as ParseMix reads it
	Results []Result `json:"results"`
}

// Result is one strategy's runs, summed up.
type Result struct {
	Strategy string `json:"strategy"`
	Runs     int    `json:"runs"` // over all markets
	Ready    int    `json:"ready"`
	// FailedProvisions are the runs that ended without a ready instance.
	FailedProvisions int `json:"failed_provisions"`
	// Rentals counts the instances created, ready or not.
	Rentals int `json:"rentals"`
	// WastedMinutes is the billed time of the instances that never became
	// ready, from create to the destroy that followed the failure's
	// detection; WastedDollars what it cost.
	WastedMinutes float64 `json:"wasted_minutes"`
	WastedDollars float64 `json:"wasted_dollars"`
	// WastedMinutesPerReady is WastedMinutes over Ready (all of it when
	// none became ready).
	WastedMinutesPerReady float64 `json:"wasted_minutes_per_ready"`
	// TimeToReady is, over the runs that got an instance, the time from
	// the run's start to the instance's readiness, failed rentals before
	// it included: p50, p90 and max, in seconds.
	TimeToReadyP50 float64 `json:"time_to_ready_p50_s"`
	TimeToReadyP90 float64 `json:"time_to_ready_p90_s"`
	TimeToReadyMax float64 `json:"time_to_ready_max_s"`
	// Faults counts the rentals that landed on a machine with each fault.
	Faults map[Fault]int `json:"faults"`
}

// epoch is when the first run starts; runs start runGap apart.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const runGap = time.Hour

// Compare runs every strategy through the markets of cfg, each in a copy
// of the same markets: the same machines, listings and boots.
func Compare(cfg Config) Report {
	rep := Report{Config: cfg, Faults: cfg.Mix.String()}
	p := pool(cfg.Strictness)
	for _, name := range Strategies {
		res := Result{Strategy: name, Faults: map[Fault]int{}}
		var toReady []time.Duration
		var wasted time.Duration
		for k := range cfg.Markets {
			m := newMarket(cfg.Seed+uint64(k), cfg.Machines, cfg.Mix)
			hosts := map[int64]*berth.HostRecord{}
			for run := range cfg.Runs {
				m.startRun(run)
				r := m.run(name, run, p, hosts)
				res.Runs++
				res.Rentals += r.attempts
				res.WastedDollars += r.dollars
				wasted += r.wasted
				for f, n := range r.faults {
					res.Faults[f] += n
				}
				if r.ready {
					res.Ready++
					toReady = append(toReady, r.toReady)
				}
			}
		}
		res.FailedProvisions = res.Runs - res.Ready
		res.WastedMinutes = wasted.Minutes()
		res.WastedMinutesPerReady = res.WastedMinutes / float64(max(res.Ready, 1))
		slices.Sort(toReady)
		res.TimeToReadyP50 = percentile(toReady, 0.50).Seconds()
		res.TimeToReadyP90 = percentile(toReady, 0.90).Seconds()
		res.TimeToReadyMax = percentile(toReady, 1).Seconds()
		rep.Results = append(rep.Results, res)
	}
	return rep
}

// run is run of strategy name in m, started runGap after the one before;
// hosts are Berth's records in this market.
func (m *marketplace) run(name string, run int, p *berth.Pool, hosts map[int64]*berth.HostRecord) runResult {
	switch name {
	case StrategySkyPilot:
		return m.runSkyPilot(run, p)
	case StrategyDstack:
		return m.runDstack(run, p)
	case StrategyBerthNoMemory:
		hosts = map[int64]*berth.HostRecord{}
	}
	return m.runBerth(run, epoch.Add(time.Duration(run)*runGap), p, hosts)
}

// percentile returns the nearest-rank q-quantile of sorted ds; 0 for none.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(math.Ceil(float64(len(ds))*q)) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}
