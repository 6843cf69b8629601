package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// arbiterTests check store.ArbiterStore: the swap lock and the schedule
// registry.
var arbiterTests = []test{
	{"SwapLock", testSwapLock},
	{"Schedules", testSchedules},
	{"ScheduleRuns", testScheduleRuns},
}

func testSwapLock(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.SwapLock(ctx); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Fatalf("SwapLock of a new store: got %v, want not found", err)
	}
	if ok, err := s.DeleteSwapLock(ctx, ""); err != nil || ok {
		t.Fatalf("DeleteSwapLock with none stored = %v, %v; want false", ok, err)
	}
	a := &berth.SwapLock{Holder: "openclaw-daily-vol", Note: "daily vol run — ünïcode", Token: "tok-a",
		AcquiredAt: base, ExpiresAt: base.Add(15 * time.Minute)}
	// Where none is stored, only prev "" writes.
	if err := s.PutSwapLock(ctx, a, "tok-x"); berth.ErrorCode(err) != berth.ECodeConflict {
		t.Fatalf("PutSwapLock over a missing lock with prev set: got %v, want a conflict", err)
	}
	if err := s.PutSwapLock(ctx, a, ""); err != nil {
		t.Fatal(err)
	}
	got, err := s.SwapLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "stored lock, nanoseconds kept", got, a)

	// Compare-and-set: only the stored lock's token replaces it.
	b := &berth.SwapLock{Holder: "bob", Token: "tok-b", AcquiredAt: base.Add(time.Hour), ExpiresAt: base.Add(2 * time.Hour)}
	if err := s.PutSwapLock(ctx, b, ""); berth.ErrorCode(err) != berth.ECodeConflict {
		t.Fatalf("PutSwapLock with prev \"\" over a stored lock: got %v, want a conflict", err)
	}
	if err := s.PutSwapLock(ctx, b, "tok-b"); berth.ErrorCode(err) != berth.ECodeConflict {
		t.Fatalf("PutSwapLock with the wrong prev: got %v, want a conflict", err)
	}
	got, _ = s.SwapLock(ctx)
	checkEqual(t, "lock after refused writes", got, a)
	if err := s.PutSwapLock(ctx, b, "tok-a"); err != nil {
		t.Fatal(err)
	}
	got, _ = s.SwapLock(ctx)
	checkEqual(t, "replaced lock", got, b)

	// Extension: same token as prev and as the new token.
	ext := *b
	ext.ExpiresAt = base.Add(3 * time.Hour)
	if err := s.PutSwapLock(ctx, &ext, "tok-b"); err != nil {
		t.Fatal(err)
	}
	got, _ = s.SwapLock(ctx)
	checkEqual(t, "extended lock", got, &ext)

	if ok, err := s.DeleteSwapLock(ctx, "tok-a"); err != nil || ok {
		t.Fatalf("DeleteSwapLock with another token = %v, %v; want false", ok, err)
	}
	if ok, err := s.DeleteSwapLock(ctx, "tok-b"); err != nil || !ok {
		t.Fatalf("DeleteSwapLock with its token = %v, %v; want true", ok, err)
	}
	if _, err := s.SwapLock(ctx); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Fatalf("SwapLock after delete: got %v, want not found", err)
	}
	if err := s.PutSwapLock(ctx, a, ""); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.DeleteSwapLock(ctx, ""); err != nil || !ok {
		t.Fatalf("DeleteSwapLock of any lock = %v, %v; want true", ok, err)
	}

	// Racing writers where none is stored: exactly one wins.
	const n = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range n {
		wg.Go(func() {
			l := &berth.SwapLock{Holder: "racer", Token: string(rune('a' + i)), AcquiredAt: base, ExpiresAt: base.Add(time.Minute)}
			err := s.PutSwapLock(ctx, l, "")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case berth.ErrorCode(err) != berth.ECodeConflict:
				t.Errorf("racing PutSwapLock: %v", err)
			}
		})
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d racing writers stored the lock; want 1", won)
	}
}

func testSchedules(t *testing.T, s store.Store) {
	ctx := context.Background()
	if list, err := s.Schedules(ctx); err != nil || len(list) != 0 {
		t.Fatalf("Schedules of a new store = %v, %v", list, err)
	}
	vol := &berth.Schedule{ID: "daily-vol", Name: "Daily Vol", Owner: "openclaw", Cron: "0 6 * * *",
		NextRun: "2026-06-18T06:00:00Z", Description: "Swaps to the big model ✓", RegisteredAt: base.Add(time.Second), UpdatedAt: base.Add(time.Second)}
	bare := &berth.Schedule{ID: "a", Name: "bare", RegisteredAt: base.Add(2 * time.Second), UpdatedAt: base.Add(2 * time.Second)}
	early := &berth.Schedule{ID: "z", Name: "registered first", RegisteredAt: base, UpdatedAt: base}
	for _, sc := range []*berth.Schedule{vol, bare, early} {
		got, err := s.PutSchedule(ctx, sc)
		if err != nil {
			t.Fatalf("PutSchedule(%s): %v", sc.ID, err)
		}
		checkEqual(t, "stored schedule "+sc.ID, got, sc)
	}
	list, err := s.Schedules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "Schedules, oldest registration first", list, []*berth.Schedule{early, vol, bare})

	// Update in place: every field but registered_at.
	upd := &berth.Schedule{ID: "daily-vol", Name: "Daily Vol v2", Cron: "30 5 * * *", RegisteredAt: base.Add(time.Hour),
		UpdatedAt: base.Add(time.Hour)}
	got, err := s.PutSchedule(ctx, upd)
	if err != nil {
		t.Fatal(err)
	}
	want := *upd
	want.RegisteredAt = vol.RegisteredAt
	checkEqual(t, "updated schedule keeps registered_at", got, &want)
	list, _ = s.Schedules(ctx)
	checkEqual(t, "Schedules after update", list, []*berth.Schedule{early, &want, bare})

	if err := s.DeleteSchedule(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSchedule(ctx, "a"); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Fatalf("DeleteSchedule of an unknown id: got %v, want not found", err)
	}
	list, _ = s.Schedules(ctx)
	checkEqual(t, "Schedules after delete", list, []*berth.Schedule{early, &want})
}

func testScheduleRuns(t *testing.T, s store.Store) {
	ctx := context.Background()
	job := &berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
	job.Name, job.User, job.Command, job.Env = "nightly-eval", "alice", berth.Argv{"python", "eval.py", "--ünï"}, map[string]string{"A": "1"}
	job.Resources.GPUs, job.MaxRuntime = 2, berth.Duration(time.Hour)
	sc := &berth.Schedule{ID: "nightly", Name: "Nightly eval", Cron: "0 2 * * *", RegisteredAt: base, UpdatedAt: base,
		Job: job, RunFrom: base, LastRun: base.Add(time.Hour), LastJobID: "ignored", LastError: "ignored"}
	got, err := s.PutSchedule(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	want := *sc
	want.LastRun, want.LastJobID, want.LastError = time.Time{}, "", "" // bookkeeping is the store's
	checkEqual(t, "stored schedule with a job", got, &want)
	display := &berth.Schedule{ID: "display", Name: "display only", RegisteredAt: base.Add(time.Second), UpdatedAt: base}
	if _, err := s.PutSchedule(ctx, display); err != nil {
		t.Fatal(err)
	}

	// Claims are a compare-and-set on last_run.
	run1 := base.Add(11 * time.Hour)
	if ok, err := s.ClaimScheduleRun(ctx, "nightly", run1, base); err != nil || ok {
		t.Fatalf("claim with the wrong prev = %v, %v; want false", ok, err)
	}
	if ok, err := s.ClaimScheduleRun(ctx, "nightly", run1, time.Time{}); err != nil || !ok {
		t.Fatalf("claim of the first run = %v, %v; want true", ok, err)
	}
	if ok, err := s.ClaimScheduleRun(ctx, "nightly", run1, time.Time{}); err != nil || ok {
		t.Fatalf("second claim of the same run = %v, %v; want false", ok, err)
	}
	if ok, err := s.ClaimScheduleRun(ctx, "missing", run1, time.Time{}); err != nil || ok {
		t.Fatalf("claim of an unknown id = %v, %v; want false", ok, err)
	}
	if err := s.RecordScheduleRun(ctx, "nightly", run1, "job-1", ""); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordScheduleRun(ctx, "nightly", base, "job-stale", "stale"); err != nil { // not the last run: ignored
		t.Fatal(err)
	}
	want.LastRun, want.LastJobID = run1, "job-1"
	list, err := s.Schedules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "schedules after a run", list, []*berth.Schedule{&want, display})

	// A new claim clears the last run's job; a failure is recorded.
	run2 := run1.Add(24 * time.Hour)
	if ok, err := s.ClaimScheduleRun(ctx, "nightly", run2, run1); err != nil || !ok {
		t.Fatalf("claim of the next run = %v, %v; want true", ok, err)
	}
	list, _ = s.Schedules(ctx)
	want.LastRun, want.LastJobID = run2, ""
	checkEqual(t, "schedule after a claim", list[0], &want)
	if err := s.RecordScheduleRun(ctx, "nightly", run2, "", "queue: unknown ✗"); err != nil {
		t.Fatal(err)
	}
	list, _ = s.Schedules(ctx)
	want.LastError = "queue: unknown ✗"
	checkEqual(t, "schedule after a failed run", list[0], &want)

	// Re-registering the same job and cron keeps run_from and the
	// bookkeeping; changing either moves run_from.
	same := *sc
	same.UpdatedAt, same.RunFrom, same.Description = base.Add(48*time.Hour), base.Add(48*time.Hour), "now described"
	got, err = s.PutSchedule(ctx, &same)
	if err != nil {
		t.Fatal(err)
	}
	want.UpdatedAt, want.Description = same.UpdatedAt, same.Description
	checkEqual(t, "re-registered with the same job", got, &want)
	changed := same
	changedJob := *job
	changedJob.Priority = 500
	changed.Job, changed.UpdatedAt, changed.RunFrom = &changedJob, base.Add(49*time.Hour), base.Add(49*time.Hour)
	if got, err = s.PutSchedule(ctx, &changed); err != nil {
		t.Fatal(err)
	}
	want.Job, want.UpdatedAt, want.RunFrom = &changedJob, changed.UpdatedAt, changed.RunFrom
	checkEqual(t, "re-registered with a changed job", got, &want)
	recron := changed
	recron.Cron, recron.UpdatedAt, recron.RunFrom = "0 3 * * *", base.Add(50*time.Hour), base.Add(50*time.Hour)
	if got, err = s.PutSchedule(ctx, &recron); err != nil {
		t.Fatal(err)
	}
	want.Cron, want.UpdatedAt, want.RunFrom = recron.Cron, recron.UpdatedAt, recron.RunFrom
	checkEqual(t, "re-registered with a changed cron", got, &want)
	// Dropping the job makes it display-only again.
	bare := recron
	bare.Job, bare.RunFrom, bare.UpdatedAt = nil, time.Time{}, base.Add(51*time.Hour)
	if got, err = s.PutSchedule(ctx, &bare); err != nil {
		t.Fatal(err)
	}
	if got.Job != nil || !got.RunFrom.IsZero() {
		t.Fatalf("entry without its job = %+v; want no job and no run_from", got)
	}

	// Racing claims of one run: exactly one wins.
	const n = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	run3 := run2.Add(24 * time.Hour)
	for range n {
		wg.Go(func() {
			ok, err := s.ClaimScheduleRun(ctx, "nightly", run3, run2)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("racing ClaimScheduleRun: %v", err)
			}
			if ok {
				won++
			}
		})
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d racing claims of one run won; want 1", won)
	}
	if err := s.DeleteSchedule(ctx, "nightly"); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.ClaimScheduleRun(ctx, "nightly", run3.Add(time.Hour), run3); err != nil || ok {
		t.Fatalf("claim of a deleted entry = %v, %v; want false", ok, err)
	}
}
