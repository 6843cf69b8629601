package berth

import (
	"testing"
	"time"
)

func TestParsePrice(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]float64{"0.60/h": 0.6, "$0.60/h": 0.6, "0.6": 0.6, " 2/h ": 2, "0": 0} {
		if got, err := ParsePrice(in); err != nil || got != want {
			t.Errorf("ParsePrice(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "cheap", "0.60/day", "NaN", "Inf/h", "0.60/h/h"} {
		if got, err := ParsePrice(in); err == nil {
			t.Errorf("ParsePrice(%q) = %v, want an error", in, got)
		}
	}
}

func TestInstanceSpentAndStarting(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	in := &Instance{PricePerH: 0.5, CreatedAt: t0, Phase: InstanceSSH}
	if got := in.Spent(t0.Add(90 * time.Minute)); got != 0.75 {
		t.Errorf("Spent after 90m at 0.5/h = %v, want 0.75", got)
	}
	if !in.Starting() {
		t.Error("an instance in phase ssh is not starting")
	}
	in.Phase, in.EndedAt = InstanceDestroyed, t0.Add(time.Hour)
	if got := in.Spent(t0.Add(5 * time.Hour)); got != 0.5 || in.Starting() {
		t.Errorf("a destroyed instance: spent %v (want 0.5, billed until its end), starting %v", got, in.Starting())
	}
	if got := (&Instance{PricePerH: 1}).Spent(t0); got != 0 {
		t.Errorf("an instance never created spent %v", got)
	}
}
