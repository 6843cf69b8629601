package scheduler

import (
	"fmt"
	"sort"
	"strings"
)

// policies are the named configurations `berth sim --policy` compares.
var policies = map[string]func() Config{
	// fifo runs each queue strictly in order: a task that does not fit
	// blocks the ones behind it (a scheduler without backfill).
	"fifo": func() Config { return Config{HeadOfLine: true} },
	// greedy places in priority order and lets any task that fits pass a
	// blocked one: no aging, fair share, reservations or preemption.
	"greedy": func() Config { return Config{} },
	// berth is the default: aging, starvation boost, fair share,
	// reservations with backfill, and preemption.
	"berth": DefaultConfig,
	// bestfit is berth with the paper's best fit: the worker with the
	// least GPU, CPU and memory capacity left (PlacementBestFit).
	"bestfit": func() Config { c := DefaultConfig(); c.Placement = PlacementBestFit; return c },
	// fgd is berth with fragmentation gradient descent: the worker and
	// GPU where fragmentation against recent requests grows least
	// (PlacementFGD).
	"fgd": func() Config { c := DefaultConfig(); c.Placement = PlacementFGD; return c },
}

// PolicyConfig returns the configuration of a named policy.
func PolicyConfig(name string) (Config, error) {
	if f, ok := policies[name]; ok {
		return f(), nil
	}
	return Config{}, fmt.Errorf("unknown policy %q (one of %s)", name, strings.Join(PolicyNames(), ", "))
}

// PolicyNames lists the named policies.
func PolicyNames() []string {
	names := make([]string, 0, len(policies))
	for n := range policies {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
