package sim

import "testing"

func TestSimStatsNearestRank(t *testing.T) {
	t.Parallel()
	values := make([]float64, 0, 200)
	for i := 200; i >= 1; i-- {
		values = append(values, float64(i))
	}
	s := stats(values)
	if s.Mean != 100.5 || s.P50 != 100 || s.P95 != 190 || s.P99 != 198 || s.Max != 200 {
		t.Fatalf("stats of 1..200 = %+v", s)
	}
	if s := stats([]float64{7}); s != (Stats{7, 7, 7, 7, 7}) {
		t.Fatalf("stats of one value = %+v", s)
	}
	if s := stats(nil); s != (Stats{}) {
		t.Fatalf("stats of none = %+v", s)
	}
}
