package arbiter_test

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/arbiter"
	"github.com/berth-dev/berth/sqlite"
)

func newRegistry(t *testing.T, path string) (*arbiter.Registry, *clock) {
	t.Helper()
	g := arbiter.NewRegistry(openStore(t, path))
	c := newClock(t0)
	g.Now = c.Now
	return g, c
}

func TestScheduleRegisterUpdateDelete(t *testing.T) {
	t.Parallel()
	g, c := newRegistry(t, filepath.Join(t.TempDir(), "berth.db"))
	ctx := t.Context()
	if list, err := g.List(ctx); err != nil || list == nil || len(list) != 0 {
		t.Fatalf("List of a new registry = %#v, %v; want an empty, non-nil list", list, err)
	}

	req := berth.ScheduleRequest{ID: "daily-vol", Name: "Daily Vol", Owner: "openclaw", Cron: "0 6 * * *",
		NextRun: "2026-06-18T06:00:00Z", Description: "Swaps to the big model, generates the vol report"}
	s, err := g.Put(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want := berth.Schedule{ID: "daily-vol", Name: "Daily Vol", Owner: "openclaw", Cron: "0 6 * * *",
		NextRun: "2026-06-18T06:00:00Z", Description: req.Description, RegisteredAt: t0, UpdatedAt: t0}
	if *s != want {
		t.Errorf("Put = %+v, want %+v", s, want)
	}
	data, _ := json.Marshal(s)
	wantJSON := `{"id":"daily-vol","name":"Daily Vol","owner":"openclaw","cron":"0 6 * * *","next_run":"2026-06-18T06:00:00Z",` +
		`"description":"Swaps to the big model, generates the vol report","registered_at":"2026-06-17T12:00:00+00:00",` +
		`"updated_at":"2026-06-17T12:00:00+00:00"}`
	if string(data) != wantJSON {
		t.Errorf("JSON = %s\nwant   %s", data, wantJSON)
	}

	// No id: one is made up.
	c.Advance(time.Minute)
	gen, err := g.Put(ctx, berth.ScheduleRequest{Name: "ad hoc"})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(gen.ID) || gen.Name != "ad hoc" || !gen.RegisteredAt.Equal(t0.Add(time.Minute)) {
		t.Errorf("Put without an id = %+v", gen)
	}

	// Re-registering an id updates in place: registered_at stays.
	c.Advance(time.Hour)
	req.Name, req.Cron, req.Owner = "Daily Vol v2", "30 5 * * MON-FRI", ""
	upd, err := g.Put(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want.Name, want.Cron, want.Owner, want.UpdatedAt = "Daily Vol v2", "30 5 * * MON-FRI", "", t0.Add(time.Hour+time.Minute)
	if *upd != want {
		t.Errorf("update = %+v, want %+v", upd, want)
	}
	list, err := g.List(ctx)
	if err != nil || len(list) != 2 || *list[0] != want || *list[1] != *gen {
		t.Fatalf("List = %+v, %v; want the updated entry, then the generated one (registration order)", list, err)
	}

	if err := g.Delete(ctx, "daily-vol"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "delete twice", g.Delete(ctx, "daily-vol"), berth.ECodeNotFound, "id")
	wantCode(t, "delete an invalid id", g.Delete(ctx, "a/b"), berth.ECodeInvalid, "id")
	if list, _ := g.List(ctx); len(list) != 1 || list[0].ID != gen.ID {
		t.Fatalf("List after delete = %+v", list)
	}
}

func TestScheduleValidation(t *testing.T) {
	t.Parallel()
	g, _ := newRegistry(t, filepath.Join(t.TempDir(), "berth.db"))
	ok := berth.ScheduleRequest{ID: "x", Name: "n"}
	for _, tc := range []struct {
		name  string
		edit  func(r *berth.ScheduleRequest)
		field string
	}{
		{"no name", func(r *berth.ScheduleRequest) { r.Name = "" }, "name"},
		{"blank name", func(r *berth.ScheduleRequest) { r.Name = " \t" }, "name"},
		{"long name", func(r *berth.ScheduleRequest) { r.Name = strings.Repeat("n", arbiter.MaxScheduleNameLen+1) }, "name"},
		{"id with a slash", func(r *berth.ScheduleRequest) { r.ID = "a/b" }, "id"},
		{"id with a space", func(r *berth.ScheduleRequest) { r.ID = "daily vol" }, "id"},
		{"id not ASCII", func(r *berth.ScheduleRequest) { r.ID = "tâche" }, "id"},
		{"id of 65", func(r *berth.ScheduleRequest) { r.ID = strings.Repeat("a", 65) }, "id"},
		{"bad cron", func(r *berth.ScheduleRequest) { r.Cron = "0 6 * *" }, "cron"},
		{"cron out of range", func(r *berth.ScheduleRequest) { r.Cron = "60 * * * *" }, "cron"},
		{"next_run not a time", func(r *berth.ScheduleRequest) { r.NextRun = "tomorrow" }, "next_run"},
		{"next_run without a zone", func(r *berth.ScheduleRequest) { r.NextRun = "2026-06-18T06:00:00" }, "next_run"},
		{"NUL in owner", func(r *berth.ScheduleRequest) { r.Owner = "a\x00" }, "owner"},
		{"long description", func(r *berth.ScheduleRequest) {
			r.Description = strings.Repeat("d", arbiter.MaxScheduleDescriptionLen+1)
		}, "description"},
	} {
		r := ok
		tc.edit(&r)
		_, err := g.Put(t.Context(), r)
		wantCode(t, tc.name, err, berth.ECodeInvalid, tc.field)
	}
	if list, _ := g.List(t.Context()); len(list) != 0 {
		t.Fatalf("refused requests registered %+v", list)
	}
	// The edges that pass.
	for _, r := range []berth.ScheduleRequest{
		{ID: strings.Repeat("a", 64), Name: "n"},
		{ID: "A-z_0.9", Name: "n", Cron: "@daily", NextRun: "2026-06-18T06:00:00.5+02:00"},
		{Name: "n", Description: "line one\nline two\ttabbed"},
	} {
		if _, err := g.Put(t.Context(), r); err != nil {
			t.Errorf("Put(%+v): %v", r, err)
		}
	}
}

func TestSchedulePersistence(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "berth.db")
	first, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := arbiter.NewRegistry(first).Put(t.Context(), berth.ScheduleRequest{ID: "nightly", Name: "Nightly eval", Cron: "0 2 * * *"})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, _ := newRegistry(t, path) // the store reopened, as after a restart
	list, err := again.List(t.Context())
	if err != nil || len(list) != 1 || *list[0] != *s {
		t.Fatalf("List from the reopened store = %+v, %v; want %+v", list, err, s)
	}
}
