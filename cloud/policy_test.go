package cloud

import (
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

var t0 = time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC)

func TestQueryFiltersByStrictness(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    berth.Strictness
		want OfferQuery
	}{
		{berth.StrictnessStrict, OfferQuery{MinReliability: 0.98, Verified: true, MinDirectPorts: 1, MinInetDownMbps: 200, MinCUDA: 12}},
		{berth.StrictnessBalanced, OfferQuery{MinReliability: 0.95, Verified: true, MinDirectPorts: 1, MinInetDownMbps: 100}},
		{"", OfferQuery{MinReliability: 0.95, Verified: true, MinDirectPorts: 1, MinInetDownMbps: 100}},
		{berth.StrictnessAggressive, OfferQuery{MinReliability: 0.90}},
	} {
		pool := &berth.Pool{GPUType: "RTX 4090", GPUs: 2, MaxPrice: 2, Strictness: tc.s}
		got := Query(pool, 0.75, []int64{7, 3, 7})
		want := tc.want
		want.GPUName, want.GPUs, want.MaxPricePerHour = "RTX 4090", 2, 0.75
		want.ExcludeMachines, want.OrderBy, want.Limit = []int64{3, 7}, "dph_total asc", QueryLimit
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q: Query = %+v, want %+v", tc.s, got, want)
		}
	}
}

func TestQueryPriceIsWhatIsLeftUnderTheCap(t *testing.T) {
	t.Parallel()
	pool := &berth.Pool{GPUType: "A100", GPUs: 1, MaxPrice: 1.5, Strictness: berth.StrictnessBalanced}
	for _, tc := range []struct {
		left, want float64
	}{
		{1.5, 1.5},
		{0.4, 0.4},
		{9, 1.5}, // never above the pool's own cap
		{0, math.SmallestNonzeroFloat64},
		{-1, math.SmallestNonzeroFloat64}, // never "any price"
	} {
		if got := Query(pool, tc.left, nil).MaxPricePerHour; got != tc.want {
			t.Errorf("left %g: MaxPricePerHour = %g, want %g", tc.left, got, tc.want)
		}
	}
	exclude := []int64{5, 1}
	Query(pool, 1, exclude)
	if !slices.Equal(exclude, []int64{5, 1}) {
		t.Errorf("Query changed its exclude argument: %v", exclude)
	}
}

func TestRecordQuarantinesInfraFatalAndDoubles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s     berth.Strictness
		first time.Duration
	}{
		{berth.StrictnessStrict, 24 * time.Hour},
		{berth.StrictnessBalanced, 6 * time.Hour},
		{berth.StrictnessAggressive, time.Hour},
	} {
		h := &berth.HostRecord{MachineID: 1}
		now := t0
		for i, want := range []time.Duration{tc.first, 2 * tc.first, 4 * tc.first} {
			Record(h, tc.s, berth.FailureInfraFatal, now)
			if got := h.QuarantinedUntil.Sub(now); got != want {
				t.Errorf("%s: infra-fatal #%d: quarantined for %v, want %v", tc.s, i+1, got, want)
			}
			if Usable(h, now) || Usable(h, h.QuarantinedUntil.Add(-time.Nanosecond)) || !Usable(h, h.QuarantinedUntil) {
				t.Errorf("%s: infra-fatal #%d: Usable wrong around the quarantine's end %v", tc.s, i+1, h.QuarantinedUntil)
			}
			now = h.QuarantinedUntil
		}
		if h.Failures[berth.FailureInfraFatal] != 3 || h.LastFailure != berth.FailureInfraFatal || !h.LastSeen.Equal(now.Add(-4*tc.first)) {
			t.Errorf("%s: record = %+v", tc.s, h)
		}
	}
}

func TestRecordQuarantineIsCappedAndNeverShrinks(t *testing.T) {
	t.Parallel()
	h := &berth.HostRecord{Failures: map[string]int{berth.FailureInfraFatal: 40}}
	Record(h, berth.StrictnessStrict, berth.FailureInfraFatal, t0)
	if got := h.QuarantinedUntil.Sub(t0); got != MaxQuarantine {
		t.Errorf("after 41 infra-fatal failures: quarantined for %v, want the cap %v", got, MaxQuarantine)
	}
	long := h.QuarantinedUntil
	// A later, shorter quarantine (another strictness) keeps the longer.
	h.Failures[berth.FailureInfraFatal] = 0
	Record(h, berth.StrictnessAggressive, berth.FailureInfraFatal, t0.Add(time.Minute))
	if !h.QuarantinedUntil.Equal(long) {
		t.Errorf("quarantine shrank from %v to %v", long, h.QuarantinedUntil)
	}
}

func TestRecordOtherClassesDoNotQuarantine(t *testing.T) {
	t.Parallel()
	h := &berth.HostRecord{}
	for _, c := range []string{berth.FailureWorkloadFatal, berth.FailureWarmup, berth.FailureUnknown, berth.FailureWorkloadFatal} {
		Record(h, berth.StrictnessStrict, c, t0)
	}
	if !h.QuarantinedUntil.IsZero() || !Usable(h, t0) {
		t.Errorf("quarantined by non-infra failures: %+v", h)
	}
	if h.Failures[berth.FailureWorkloadFatal] != 2 || h.Failures[berth.FailureWarmup] != 1 || h.LastFailure != berth.FailureWorkloadFatal {
		t.Errorf("failures = %v, last %q", h.Failures, h.LastFailure)
	}
}

func TestRecordSuccessEndsOnlyAnExpiredQuarantine(t *testing.T) {
	t.Parallel()
	h := &berth.HostRecord{}
	Record(h, berth.StrictnessBalanced, berth.FailureInfraFatal, t0)
	until := h.QuarantinedUntil
	Record(h, berth.StrictnessBalanced, "", t0.Add(time.Hour)) // e.g. an instance adopted mid-quarantine
	if h.Successes != 1 || !h.QuarantinedUntil.Equal(until) {
		t.Errorf("success during quarantine: %+v", h)
	}
	Record(h, berth.StrictnessBalanced, "", until)
	if h.Successes != 2 || !h.QuarantinedUntil.IsZero() || !h.LastSeen.Equal(until) {
		t.Errorf("success after quarantine: %+v", h)
	}
}

func TestUsable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		h    *berth.HostRecord
		want bool
	}{
		{"no record", nil, true},
		{"clean", &berth.HostRecord{Successes: 3}, true},
		{"blocked", &berth.HostRecord{Successes: 3, Blocked: true}, false},
		{"quarantined", &berth.HostRecord{QuarantinedUntil: t0.Add(time.Second)}, false},
		{"quarantine over", &berth.HostRecord{QuarantinedUntil: t0}, true},
	} {
		if got := Usable(tc.h, t0); got != tc.want {
			t.Errorf("%s: Usable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRank(t *testing.T) {
	t.Parallel()
	offer := func(id, machine int64, price float64) Offer {
		return Offer{ID: id, MachineID: machine, GPUName: "RTX 4090", DriverVersion: "550.1", PricePerHour: price}
	}
	proven := &berth.HostRecord{Successes: 2}
	suspect := &berth.HostRecord{Successes: 5, QuarantinedUntil: t0.Add(-time.Hour)}
	oldFailure := &berth.HostRecord{Successes: 1, QuarantinedUntil: t0.Add(-SuspectFor)}
	quarantined := &berth.HostRecord{Successes: 9, QuarantinedUntil: t0.Add(time.Hour)}
	blocked := &berth.HostRecord{Successes: 9, Blocked: true}
	onlyWorkload := &berth.HostRecord{Failures: map[string]int{berth.FailureWorkloadFatal: 1}}
	offers := []Offer{
		offer(1, 10, 0.30),  // unknown
		offer(2, 11, 0.50),  // proven
		offer(3, 12, 0.20),  // suspect
		offer(4, 13, 0.40),  // proven, cheaper
		offer(5, 14, 0.10),  // quarantined
		offer(6, 15, 0.10),  // blocked
		offer(7, 16, 0.30),  // unknown, same price as 1: by machine
		offer(8, 17, 0.60),  // failed long ago, then: proven
		offer(9, 18, 0.25),  // a workload failure does not blame the host
		offer(10, 19, 0.05), // only ever ran out of warm-up budget: suspect
	}
	hosts := map[int64]*berth.HostRecord{11: proven, 12: suspect, 13: proven, 14: quarantined, 15: blocked, 17: oldFailure, 18: onlyWorkload,
		19: {Failures: map[string]int{berth.FailureWarmup: 1}}}
	ids := func(os []Offer) []int64 {
		var out []int64
		for _, o := range os {
			out = append(out, o.ID)
		}
		return out
	}
	for _, tc := range []struct {
		s    berth.Strictness
		want []int64
	}{
		{berth.StrictnessStrict, []int64{4, 2, 8, 9, 1, 7, 10, 3}},
		{berth.StrictnessBalanced, []int64{4, 2, 8, 9, 1, 7, 10, 3}},
		{berth.StrictnessAggressive, []int64{9, 1, 7, 4, 2, 8, 10, 3}},
	} {
		before := slices.Clone(offers)
		if got := ids(Rank(offers, hosts, tc.s, t0)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Rank = %v, want %v", tc.s, got, tc.want)
		}
		if !slices.Equal(offers, before) {
			t.Errorf("%s: Rank changed its argument", tc.s)
		}
	}
}

func TestRankDownRanksAClassWithRepeatedWorkloadFailures(t *testing.T) {
	t.Parallel()
	offers := []Offer{
		{ID: 1, MachineID: 1, GPUName: "RTX 5090", DriverVersion: "570.1", PricePerHour: 0.3},
		{ID: 2, MachineID: 2, GPUName: "RTX 4090", DriverVersion: "535.2", PricePerHour: 0.5},
		{ID: 3, MachineID: 3, GPUName: "RTX 4090", DriverVersion: "550.1", PricePerHour: 0.4},
		{ID: 4, MachineID: 4, GPUName: "RTX 4090", DriverVersion: "570.1", PricePerHour: 0.2},
	}
	wf := func(gpu, driver string, n int) *berth.HostRecord {
		return &berth.HostRecord{GPUName: gpu, Driver: driver, Failures: map[string]int{berth.FailureWorkloadFatal: n}}
	}
	for _, tc := range []struct {
		name  string
		s     berth.Strictness
		hosts map[int64]*berth.HostRecord
		want  []int64
	}{
		{"no failures: by price", berth.StrictnessStrict, nil, []int64{4, 1, 3, 2}},
		{"one failure on driver 570: not yet", berth.StrictnessStrict,
			map[int64]*berth.HostRecord{90: wf("RTX 4090", "570.1", 1)}, []int64{4, 1, 3, 2}},
		// Two failures over two machines with driver 570 (machines not
		// offered now): strict down-ranks the driver, both its offers.
		{"driver 570 twice, strict", berth.StrictnessStrict,
			map[int64]*berth.HostRecord{90: wf("RTX 4090", "570.1", 1), 91: wf("RTX 3090", "570.1", 1)}, []int64{3, 2, 4, 1}},
		{"driver 570 twice, balanced needs three", berth.StrictnessBalanced,
			map[int64]*berth.HostRecord{90: wf("RTX 4090", "570.1", 1), 91: wf("RTX 3090", "570.1", 1)}, []int64{4, 1, 3, 2}},
		{"RTX 5090 three times, balanced", berth.StrictnessBalanced,
			map[int64]*berth.HostRecord{1: wf("RTX 5090", "", 3)}, []int64{4, 3, 2, 1}},
	} {
		if got := Rank(offers, tc.hosts, tc.s, t0); !slices.EqualFunc(got, tc.want, func(o Offer, id int64) bool { return o.ID == id }) {
			var ids []int64
			for _, o := range got {
				ids = append(ids, o.ID)
			}
			t.Errorf("%s: Rank = %v, want %v", tc.name, ids, tc.want)
		}
	}
}
