package main

import (
	"fmt"
	"io"
	"slices"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/market"
)

// runSimMarket is berth sim market: the provisioning strategies compared
// in a seeded simulated marketplace (docs/performance.md).
func runSimMarket(m *Main, args []string) error {
	fs := m.flagSet("sim market", "[flags]")
	seed := fs.Uint64("seed", 1, "the first market's seed (the next market's is one more): the same seed, the same results")
	markets := fs.Int("markets", 20, "markets to run in (1 to 1000)")
	runs := fs.Int("runs", 50, "provisioning runs per strategy in each market, an hour apart (markets × runs at most 100000)")
	machines := fs.Int("machines", 100, "machines in the market (1 to 10000)")
	faults := fs.String("faults", market.DefaultMix.String(), "share of machines with each fault (create, ssh, gpu, stall, vanish), or none")
	strictness := fs.String("strictness", string(berth.StrictnessBalanced), "Berth's pool strictness: strict, balanced or aggressive")
	output := fs.String("o", "table", "output: table or json")
	if err := parse(fs, args); err != nil {
		return err
	}
	mix, err := market.ParseMix(*faults)
	switch s := berth.Strictness(*strictness); {
	case fs.NArg() > 0:
		return berth.Invalidf("args", "unexpected argument %q", fs.Arg(0))
	case err != nil:
		return &berth.Error{Code: berth.ECodeInvalid, Field: "--faults", Err: err}
	case *markets < 1 || *markets > 1000:
		return berth.Invalidf("--markets", "must be from 1 to 1000")
	case *runs < 1 || *runs > 100000 / *markets:
		return berth.Invalidf("--runs", "must be from 1 to %d with %d markets", 100000 / *markets, *markets)
	case *machines < 1 || *machines > 10000:
		return berth.Invalidf("--machines", "must be from 1 to 10000")
	case !slices.Contains([]berth.Strictness{berth.StrictnessStrict, berth.StrictnessBalanced, berth.StrictnessAggressive}, s):
		return berth.Invalidf("--strictness", "must be strict, balanced or aggressive")
	case *output != "table" && *output != "json":
		return berth.Invalidf("-o", "must be table or json")
	}
	rep := market.Compare(market.Config{Seed: *seed, Markets: *markets, Runs: *runs, Machines: *machines, Mix: mix, Strictness: berth.Strictness(*strictness)})
	if *output == "json" {
		return printJSON(m.Stdout, rep)
	}
	return printMarket(m.Stdout, rep)
}

// printMarket writes one column per strategy.
func printMarket(w io.Writer, rep market.Report) error {
	fmt.Fprintf(w, "berth sim market: seeds %d to %d, %d runs an hour apart in each, %d machines, faults %s, Berth's pool %s\n\n",
		rep.Seed, rep.Seed+uint64(rep.Markets)-1, rep.Runs, rep.Machines, rep.Faults, rep.Strictness)
	t := newTable(w, append([]string{"metric"}, market.Strategies...)...)
	row := func(name string, cell func(market.Result) string) {
		cols := []string{name}
		for _, r := range rep.Results {
			cols = append(cols, cell(r))
		}
		t.row(cols...)
	}
	row("ready", func(r market.Result) string { return fmt.Sprint(r.Ready) })
	row("failed provisions", func(r market.Result) string { return fmt.Sprint(r.FailedProvisions) })
	row("rentals", func(r market.Result) string { return fmt.Sprint(r.Rentals) })
	row("rentals of a faulty machine", func(r market.Result) string {
		var n int
		for _, c := range r.Faults {
			n += c
		}
		return fmt.Sprint(n)
	})
	row("wasted minutes per ready", func(r market.Result) string { return fmt.Sprintf("%.2f", r.WastedMinutesPerReady) })
	row("wasted minutes", func(r market.Result) string { return fmt.Sprintf("%.1f", r.WastedMinutes) })
	row("wasted $", func(r market.Result) string { return fmt.Sprintf("%.2f", r.WastedDollars) })
	row("time to ready p50", func(r market.Result) string { return seconds(r.TimeToReadyP50) })
	row("time to ready p90", func(r market.Result) string { return seconds(r.TimeToReadyP90) })
	row("time to ready max", func(r market.Result) string { return seconds(r.TimeToReadyMax) })
	return t.flush()
}
