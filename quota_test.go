package berth_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// checkInvalid fails t unless err is an ECodeInvalid *berth.Error naming
// field, or, for field "", unless err is nil.
func checkInvalid(t *testing.T, what string, err error, field string) {
	t.Helper()
	if field == "" {
		if err != nil {
			t.Errorf("%s: %v, want no error", what, err)
		}
		return
	}
	e, ok := err.(*berth.Error)
	if !ok || e.Code != berth.ECodeInvalid || e.Field != field || e.Message == "" {
		t.Errorf("%s: error %#v, want an invalid error naming %q", what, err, field)
	}
}

func TestQuotaRuleValidate(t *testing.T) {
	t.Parallel()
	rule := func(scope, name string, gpus, jobs int, weight float64) berth.QuotaRule {
		return berth.QuotaRule{Scope: scope, Name: name, MaxGPUs: gpus, MaxJobs: jobs, Weight: weight}
	}
	for _, tc := range []struct {
		name  string
		rule  berth.QuotaRule
		field string // "" for valid
	}{
		{"user gpus", rule("user", "alice", 8, berth.NoLimit, 0), ""},
		{"queue jobs", rule("queue", "gpu", berth.NoLimit, 4, 0), ""},
		{"template both", rule("template", "jupyter", 2, 1, 0), ""},
		{"zero caps block", rule("user", "bob", 0, 0, 0), ""},
		{"weight only", rule("user", "carol", berth.NoLimit, berth.NoLimit, 2.5), ""},
		{"max values", rule("user", "a", berth.MaxQuotaValue, berth.MaxQuotaValue, 1000), ""},
		{"email-like name", rule("user", "ana.b_c-d@example.org", 1, berth.NoLimit, 0), ""},
		{"128-char name", rule("user", strings.Repeat("a", 128), 1, berth.NoLimit, 0), ""},
		{"empty scope", rule("", "alice", 1, berth.NoLimit, 0), "scope"},
		{"unknown scope", rule("group", "ml", 1, berth.NoLimit, 0), "scope"},
		{"scope in capitals", rule("User", "alice", 1, berth.NoLimit, 0), "scope"},
		{"empty name", rule("user", "", 1, berth.NoLimit, 0), "name"},
		{"name with colon", rule("user", "a:b", 1, berth.NoLimit, 0), "name"},
		{"name with space", rule("user", "a b", 1, berth.NoLimit, 0), "name"},
		{"name starting with dash", rule("user", "-a", 1, berth.NoLimit, 0), "name"},
		{"129-char name", rule("user", strings.Repeat("a", 129), 1, berth.NoLimit, 0), "name"},
		{"gpus -2", rule("user", "alice", -2, berth.NoLimit, 0), "max_gpus"},
		{"gpus over max", rule("user", "alice", berth.MaxQuotaValue+1, berth.NoLimit, 0), "max_gpus"},
		{"jobs -2", rule("user", "alice", berth.NoLimit, -2, 0), "max_jobs"},
		{"jobs over max", rule("user", "alice", berth.NoLimit, berth.MaxQuotaValue+1, 0), "max_jobs"},
		{"negative weight", rule("user", "alice", 1, berth.NoLimit, -1), "weight"},
		{"weight over 1000", rule("user", "alice", 1, berth.NoLimit, 1000.5), "weight"},
		{"NaN weight", rule("user", "alice", 1, berth.NoLimit, math.NaN()), "weight"},
		{"infinite weight", rule("user", "alice", 1, berth.NoLimit, math.Inf(1)), "weight"},
		{"weight on a queue", rule("queue", "gpu", 1, berth.NoLimit, 2), "weight"},
		{"weight on a template", rule("template", "jupyter", berth.NoLimit, berth.NoLimit, 2), "weight"},
		{"caps nothing", rule("user", "alice", berth.NoLimit, berth.NoLimit, 0), "max_gpus"},
		{"default rule", berth.DefaultQuotaRule(), "scope"},
	} {
		err := tc.rule.Validate()
		checkInvalid(t, tc.name, err, tc.field)
	}
}

func TestQuotaRuleIDAndLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rule   berth.QuotaRule
		id     string
		limits string
	}{
		{berth.QuotaRule{Scope: "user", Name: "alice", MaxGPUs: 8, MaxJobs: 4, Weight: 2}, "user:alice", "gpus<=8 jobs<=4 weight=2"},
		{berth.QuotaRule{Scope: "queue", Name: "gpu", MaxGPUs: 0, MaxJobs: berth.NoLimit}, "queue:gpu", "gpus<=0"},
		{berth.QuotaRule{Scope: "template", Name: "llm", MaxGPUs: berth.NoLimit, MaxJobs: 3}, "template:llm", "jobs<=3"},
		{berth.QuotaRule{Scope: "user", Name: "bob", MaxGPUs: berth.NoLimit, MaxJobs: berth.NoLimit, Weight: 0.25}, "user:bob", "weight=0.25"},
		{berth.DefaultQuotaRule(), ":", ""},
	} {
		if got := tc.rule.ID(); got != tc.id {
			t.Errorf("ID() of %+v = %q, want %q", tc.rule, got, tc.id)
		}
		if got := tc.rule.Limits(); got != tc.limits {
			t.Errorf("Limits() of %+v = %q, want %q", tc.rule, got, tc.limits)
		}
	}
}

func TestParseQuotaID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		id, scope, name, field string
	}{
		{"user:alice", "user", "alice", ""},
		{"queue:gpu", "queue", "gpu", ""},
		{"template:jupyter", "template", "jupyter", ""},
		{"user:ana@example.org", "user", "ana@example.org", ""},
		{"alice", "", "", "id"},
		{"", "", "", "id"},
		{"user:", "", "", "name"},
		{":alice", "", "", "scope"},
		{"group:ml", "", "", "scope"},
		{"user:a:b", "", "", "name"},
		{"user:a/b", "", "", "name"},
	} {
		scope, name, err := berth.ParseQuotaID(tc.id)
		checkInvalid(t, "ParseQuotaID("+tc.id+")", err, tc.field)
		if scope != tc.scope || name != tc.name {
			t.Errorf("ParseQuotaID(%q) = %q, %q; want %q, %q", tc.id, scope, name, tc.scope, tc.name)
		}
	}
}

func TestParseQuotaRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		id     string
		limits []string
		want   berth.QuotaRule // checked when field is ""
		field  string
	}{
		{"user:alice", []string{"gpus<=8", "jobs<=4", "weight=2"},
			berth.QuotaRule{Scope: "user", Name: "alice", MaxGPUs: 8, MaxJobs: 4, Weight: 2}, ""},
		{"queue:gpu", []string{"jobs<=10"},
			berth.QuotaRule{Scope: "queue", Name: "gpu", MaxGPUs: berth.NoLimit, MaxJobs: 10}, ""},
		{"template:llm", []string{"gpus<=0"},
			berth.QuotaRule{Scope: "template", Name: "llm", MaxGPUs: 0, MaxJobs: berth.NoLimit}, ""},
		{"user:bob", []string{"weight=0.5"},
			berth.QuotaRule{Scope: "user", Name: "bob", MaxGPUs: berth.NoLimit, MaxJobs: berth.NoLimit, Weight: 0.5}, ""},
		{"user:bob", []string{"weight=1e3"},
			berth.QuotaRule{Scope: "user", Name: "bob", MaxGPUs: berth.NoLimit, MaxJobs: berth.NoLimit, Weight: 1000}, ""},

		{"alice", []string{"gpus<=8"}, berth.QuotaRule{}, "id"},
		{"group:ml", []string{"gpus<=8"}, berth.QuotaRule{}, "scope"},
		{"user:", []string{"gpus<=8"}, berth.QuotaRule{}, "name"},
		{"user:alice", nil, berth.QuotaRule{}, "max_gpus"}, // caps nothing
		{"user:alice", []string{"gpus<=x"}, berth.QuotaRule{}, "max_gpus"},
		{"user:alice", []string{"gpus<=-1"}, berth.QuotaRule{}, "max_gpus"},
		{"user:alice", []string{"gpus<=1.5"}, berth.QuotaRule{}, "max_gpus"},
		{"user:alice", []string{"gpus<="}, berth.QuotaRule{}, "max_gpus"},
		{"user:alice", []string{"gpus<=1000001"}, berth.QuotaRule{}, "max_gpus"},
		{"user:alice", []string{"gpus<=99999999999999999999"}, berth.QuotaRule{}, "max_gpus"},
		{"user:alice", []string{"jobs<=many"}, berth.QuotaRule{}, "max_jobs"},
		{"user:alice", []string{"gpus<=1", "gpus<=2"}, berth.QuotaRule{}, "max_gpus"},
		{"user:alice", []string{"weight=heavy"}, berth.QuotaRule{}, "weight"},
		{"user:alice", []string{"weight=-1"}, berth.QuotaRule{}, "weight"},
		{"user:alice", []string{"weight=NaN"}, berth.QuotaRule{}, "weight"},
		{"user:alice", []string{"weight=1", "weight=2"}, berth.QuotaRule{}, "weight"},
		{"queue:gpu", []string{"weight=2"}, berth.QuotaRule{}, "weight"},
		// Only the documented forms: a cap is <=, a weight is =.
		{"user:alice", []string{"gpus=8"}, berth.QuotaRule{}, "limits"},
		{"user:alice", []string{"weight<=2"}, berth.QuotaRule{}, "limits"},
		{"user:alice", []string{"gpus>=8"}, berth.QuotaRule{}, "limits"},
		{"user:alice", []string{"memory<=8"}, berth.QuotaRule{}, "limits"},
		{"user:alice", []string{"8"}, berth.QuotaRule{}, "limits"},
		{"user:alice", []string{""}, berth.QuotaRule{}, "limits"},
	} {
		what := "ParseQuotaRule(" + tc.id + ", " + mustJSON(t, tc.limits) + ")"
		got, err := berth.ParseQuotaRule(tc.id, tc.limits)
		checkInvalid(t, what, err, tc.field)
		if tc.field == "" && got != tc.want {
			t.Errorf("%s = %+v, want %+v", what, got, tc.want)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestQuotaRuleJSON(t *testing.T) {
	t.Parallel()
	q := berth.QuotaRule{Scope: "user", Name: "alice", MaxGPUs: 8, MaxJobs: berth.NoLimit, Weight: 2,
		UpdatedAt: time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)}
	got := mustJSON(t, q)
	want := `{"scope":"user","name":"alice","max_gpus":8,"max_jobs":-1,"weight":2,"updated_at":"2025-03-14T15:09:26.535897932Z"}`
	if got != want {
		t.Errorf("JSON = %s, want %s", got, want)
	}
	// No weight and no time are left out.
	bare := berth.QuotaRule{Scope: "queue", Name: "gpu", MaxGPUs: berth.NoLimit, MaxJobs: 3}
	if got, want := mustJSON(t, bare), `{"scope":"queue","name":"gpu","max_gpus":-1,"max_jobs":3}`; got != want {
		t.Errorf("JSON = %s, want %s", got, want)
	}
	// Decoding over the default leaves absent caps unlimited.
	d := berth.DefaultQuotaRule()
	if err := json.Unmarshal([]byte(`{"max_jobs":4}`), &d); err != nil {
		t.Fatal(err)
	}
	if d.MaxGPUs != berth.NoLimit || d.MaxJobs != 4 || d.Weight != 0 {
		t.Errorf("decoded over DefaultQuotaRule: %+v", d)
	}
}
