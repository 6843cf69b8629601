package berth_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

func TestSparkTime(t *testing.T) {
	t.Parallel()
	paris := time.FixedZone("CEST", 2*3600)
	at := time.Date(2026, 6, 17, 14, 0, 0, 999_999_999, paris)
	if got := berth.FormatSparkTime(at); got != "2026-06-17T12:00:00+00:00" {
		t.Errorf("FormatSparkTime = %q: want UTC, +00:00, whole seconds (truncated)", got)
	}
	if got := berth.FormatSparkTime(time.Time{}); got != "" {
		t.Errorf("FormatSparkTime(zero) = %q", got)
	}
	for in, want := range map[string]time.Time{
		"2026-06-17T12:00:00+00:00":   time.Date(2026, 6, 17, 12, 0, 0, 0, time.UTC),
		"2026-06-17T12:00:00Z":        time.Date(2026, 6, 17, 12, 0, 0, 0, time.UTC),
		"2026-06-17T14:00:00.5+02:00": time.Date(2026, 6, 17, 12, 0, 0, 5e8, time.UTC),
		"2026-06-17T12:00:00.123456Z": time.Date(2026, 6, 17, 12, 0, 0, 123456000, time.UTC),
		"":                            {},
	} {
		got, err := berth.ParseSparkTime(in)
		if err != nil || !got.Equal(want) || (!got.IsZero() && got.Location() != time.UTC) {
			t.Errorf("ParseSparkTime(%q) = %v, %v; want %v in UTC", in, got, err, want)
		}
	}
	for _, bad := range []string{"2026-06-17T12:00:00", "2026-06-17 12:00:00Z", "tomorrow", "1718625600"} {
		if _, err := berth.ParseSparkTime(bad); err == nil {
			t.Errorf("ParseSparkTime(%q) succeeded", bad)
		}
	}
}

func TestSwapLockStateJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 6, 17, 12, 0, 0, 0, time.UTC)
	l := &berth.SwapLock{Holder: "h", Token: "secret", AcquiredAt: at, ExpiresAt: at.Add(time.Minute)}
	for _, tc := range []struct {
		now  time.Time
		want string
	}{
		{at, `{"held":true,"holder":"h","expires_at":"2026-06-17T12:01:00+00:00","seconds_remaining":60,"note":""}`},
		{at.Add(59*time.Second + time.Nanosecond), `{"held":true,"holder":"h","expires_at":"2026-06-17T12:01:00+00:00","seconds_remaining":1,"note":""}`},
		{at.Add(time.Minute), `{"held":false}`},
	} {
		data, err := json.Marshal(l.StateAt(tc.now))
		if err != nil || string(data) != tc.want {
			t.Errorf("state at %v = %s, %v; want %s", tc.now, data, err, tc.want)
		}
	}
	var nilLock *berth.SwapLock
	if nilLock.HeldAt(at) || nilLock.StateAt(at).Held {
		t.Error("a nil lock is held")
	}
	var st berth.SwapLockState
	if err := json.Unmarshal([]byte(`{"held":true,"expires_at":"noon"}`), &st); err == nil {
		t.Error("a bad expires_at decoded")
	}
	if err := json.Unmarshal([]byte(`{"held":false}`), &st); err != nil || st != (berth.SwapLockState{}) {
		t.Errorf(`{"held":false} decoded to %+v, %v`, st, err)
	}
	var s berth.Schedule
	if err := json.Unmarshal([]byte(`{"id":"x","updated_at":"noon"}`), &s); err == nil {
		t.Error("a bad updated_at decoded")
	}
	if got := berth.ClampSwapLockTTL(0); got != time.Second {
		t.Errorf("ClampSwapLockTTL(0) = %v", got)
	}
	if got := berth.ClampSwapLockTTL(48 * time.Hour); got != 24*time.Hour {
		t.Errorf("ClampSwapLockTTL(48h) = %v", got)
	}
}

func TestScheduleJSONWithJob(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 6, 17, 12, 0, 0, 0, time.UTC)
	job := &berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
	job.Command = berth.Argv{"true"}
	in := berth.Schedule{ID: "n", Name: "N", Cron: "@daily", RegisteredAt: at, UpdatedAt: at, Job: job,
		LastRun: at.Add(time.Hour), LastJobID: "j1", LastError: "boom"}
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out berth.Schedule
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	if out.Job == nil || out.Job.Command[0] != "true" || !out.LastRun.Equal(in.LastRun) || out.LastJobID != "j1" ||
		out.LastError != "boom" {
		t.Errorf("round trip of %s = %+v", data, out)
	}
	// Never run: last_run and last_job_id are "", last_error left out.
	in.LastRun, in.LastJobID, in.LastError = time.Time{}, "", ""
	data, _ = json.Marshal(in)
	var keys map[string]json.RawMessage
	_ = json.Unmarshal(data, &keys)
	if string(keys["last_run"]) != `""` || string(keys["last_job_id"]) != `""` || keys["last_error"] != nil {
		t.Errorf("never run: %s", data)
	}
	// Without a job: the seed's keys only, even with stray bookkeeping.
	in.Job, in.LastRun = nil, at
	data, _ = json.Marshal(in)
	keys = nil
	_ = json.Unmarshal(data, &keys)
	if len(keys) != 8 || keys["job"] != nil || keys["last_run"] != nil {
		t.Errorf("display-only entry: %s", data)
	}
	if err := json.Unmarshal([]byte(`{"id":"x","last_run":"noon"}`), &out); err == nil {
		t.Error("a bad last_run decoded")
	}
}
