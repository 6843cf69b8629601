package arbiter_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/arbiter"
	"github.com/berth-dev/berth/sqlite"
)

// t0 is the tests' starting time, with nanoseconds that the store keeps.
var t0 = time.Date(2026, 6, 17, 12, 0, 0, 123456789, time.UTC)

// clock is an injectable clock that tests move by hand.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// openStore opens a SQLite store at path (created when missing), closed
// when t ends.
func openStore(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return st
}

// newLock returns a lock on a new store and its clock.
func newLock(t *testing.T) (*arbiter.Lock, *clock) {
	t.Helper()
	l := arbiter.NewLock(openStore(t, filepath.Join(t.TempDir(), "berth.db")))
	c := newClock(t0)
	l.Now = c.Now
	return l, c
}

// wantCode fails t unless err is a *berth.Error with code and, when field
// is not "", that field.
func wantCode(t *testing.T, what string, err error, code, field string) {
	t.Helper()
	be, ok := err.(*berth.Error)
	if !ok {
		t.Fatalf("%s: error %v (%T), want a *berth.Error %s", what, err, err, code)
	}
	if be.Code != code || (field != "" && be.Field != field) {
		t.Fatalf("%s: error %+v, want code %s field %q", what, be, code, field)
	}
}

func acquire(t *testing.T, l *arbiter.Lock, holder, note string, ttl time.Duration, token string) berth.SwapLockState {
	t.Helper()
	st, err := l.Acquire(t.Context(), holder, note, ttl, token)
	if err != nil {
		t.Fatalf("Acquire(%s): %v", holder, err)
	}
	return st
}

func TestAcquire(t *testing.T) {
	t.Parallel()
	l, _ := newLock(t)
	st := acquire(t, l, "openclaw-daily-vol", "daily vol run", 900*time.Second, "")
	if raw, err := hex.DecodeString(st.Token); err != nil || len(raw) != 32 {
		t.Errorf("token %q: want 32 random bytes in hex", st.Token)
	}
	want := berth.SwapLockState{Held: true, Holder: "openclaw-daily-vol", AcquiredAt: t0, ExpiresAt: t0.Add(900 * time.Second),
		SecondsRemaining: 900, Note: "daily vol run", Token: st.Token}
	if st != want {
		t.Errorf("Acquire = %+v, want %+v", st, want)
	}
	// The seed's shape, in its format.
	data, _ := json.Marshal(st)
	wantJSON := `{"held":true,"holder":"openclaw-daily-vol","acquired_at":"2026-06-17T12:00:00+00:00",` +
		`"expires_at":"2026-06-17T12:15:00+00:00","seconds_remaining":900,"note":"daily vol run","token":"` + st.Token + `"}`
	if string(data) != wantJSON {
		t.Errorf("JSON = %s\nwant   %s", data, wantJSON)
	}
	var back berth.SwapLockState
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if want := st; back.Holder != want.Holder || back.Token != want.Token || back.SecondsRemaining != 900 ||
		!back.ExpiresAt.Equal(want.ExpiresAt.Truncate(time.Second)) || !back.AcquiredAt.Equal(t0.Truncate(time.Second)) {
		t.Errorf("JSON round trip = %+v", back)
	}

	// Status never shows the token nor acquired_at.
	status, err := l.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	data, _ = json.Marshal(status)
	wantJSON = `{"held":true,"holder":"openclaw-daily-vol","expires_at":"2026-06-17T12:15:00+00:00","seconds_remaining":900,"note":"daily vol run"}`
	if string(data) != wantJSON {
		t.Errorf("Status JSON = %s\nwant          %s", data, wantJSON)
	}
}

func TestTTLClamped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ttl, want time.Duration
	}{
		{0, time.Second},
		{-time.Hour, time.Second},
		{time.Millisecond, time.Second},
		{time.Second, time.Second},
		{90 * time.Second, 90 * time.Second},
		{86400 * time.Second, 86400 * time.Second},
		{86401 * time.Second, 86400 * time.Second},
		{365 * 24 * time.Hour, 86400 * time.Second},
	} {
		t.Run(tc.ttl.String(), func(t *testing.T) {
			t.Parallel()
			l, _ := newLock(t)
			st := acquire(t, l, "h", "", tc.ttl, "")
			if got := st.ExpiresAt.Sub(st.AcquiredAt); got != tc.want {
				t.Errorf("ttl %v: window %v, want %v", tc.ttl, got, tc.want)
			}
			if st.SecondsRemaining != int64(tc.want/time.Second) {
				t.Errorf("seconds_remaining %d, want %d", st.SecondsRemaining, tc.want/time.Second)
			}
		})
	}
}

func TestAcquireRefusals(t *testing.T) {
	t.Parallel()
	l, c := newLock(t)
	mine := acquire(t, l, "alice", "first", time.Minute, "")
	c.Advance(10 * time.Second)

	// Another holder: 409 with the lock's state, no token.
	st, err := l.Acquire(t.Context(), "bob", "", time.Minute, "")
	wantCode(t, "another holder", err, berth.ECodeConflict, "holder")
	want := berth.SwapLockState{Held: true, Holder: "alice", ExpiresAt: t0.Add(time.Minute), SecondsRemaining: 50, Note: "first"}
	if st != want {
		t.Errorf("state with the conflict = %+v, want %+v", st, want)
	}
	// Even with the holder's token, another holder name is a conflict.
	_, err = l.Acquire(t.Context(), "bob", "", time.Minute, mine.Token)
	wantCode(t, "another holder with the token", err, berth.ECodeConflict, "holder")

	// The same holder without its token, or with another: 403.
	_, err = l.Acquire(t.Context(), "alice", "", time.Minute, "")
	wantCode(t, "same holder, no token", err, berth.ECodeForbidden, "token")
	_, err = l.Acquire(t.Context(), "alice", "", time.Minute, arbiter.NewToken())
	wantCode(t, "same holder, wrong token", err, berth.ECodeForbidden, "token")

	// Nothing changed.
	st, err = l.Status(t.Context())
	if err != nil || st != want {
		t.Errorf("Status after refusals = %+v, %v; want %+v", st, err, want)
	}

	// Bad input.
	for _, tc := range []struct{ holder, note, field string }{
		{"", "", "holder"},
		{"   ", "", "holder"},
		{"a\x00b", "", "holder"},
		{"a\rb", "", "holder"},
		{string(make([]byte, arbiter.MaxHolderLen+1)), "", "holder"},
		{"x", "\xff", "note"},
		{"x", string(make([]byte, arbiter.MaxNoteLen+1)), "note"},
	} {
		_, err := l.Acquire(t.Context(), tc.holder, tc.note, time.Minute, "")
		wantCode(t, fmt.Sprintf("holder %q note %.10q", tc.holder, tc.note), err, berth.ECodeInvalid, tc.field)
	}
}

func TestExtendKeepsToken(t *testing.T) {
	t.Parallel()
	l, c := newLock(t)
	first := acquire(t, l, "alice", "warming", 100*time.Second, "")
	c.Advance(60 * time.Second)
	ext := acquire(t, l, "alice", "", 100*time.Second, first.Token)
	if ext.Token != first.Token {
		t.Errorf("extension changed the token")
	}
	if !ext.AcquiredAt.Equal(t0) || !ext.ExpiresAt.Equal(t0.Add(160*time.Second)) || ext.SecondsRemaining != 100 {
		t.Errorf("extension = %+v: want acquired_at kept, the window slid to now + 100 s", ext)
	}
	if ext.Note != "warming" {
		t.Errorf("an extension without a note changed the note to %q", ext.Note)
	}
	c.Advance(99 * time.Second) // past the first window's end
	if err := l.Check(t.Context(), ""); err == nil {
		t.Fatal("the extended lock is no longer held")
	}
	ext = acquire(t, l, "alice", "now the big model", time.Second, first.Token)
	if ext.Note != "now the big model" || ext.Token != first.Token || ext.SecondsRemaining != 1 {
		t.Errorf("second extension = %+v", ext)
	}
}

func TestExpiry(t *testing.T) {
	t.Parallel()
	l, c := newLock(t)
	old := acquire(t, l, "alice", "", 30*time.Second, "")
	c.Advance(29*time.Second + 500*time.Millisecond)
	st, _ := l.Status(t.Context())
	if !st.Held || st.SecondsRemaining != 1 {
		t.Errorf("half a second before expiry: %+v, want held with 1 s remaining (rounded up)", st)
	}
	c.Advance(500 * time.Millisecond) // exactly at expires_at: no longer held
	st, err := l.Status(t.Context())
	if err != nil || st != (berth.SwapLockState{}) {
		t.Fatalf("Status at expiry = %+v, %v; want not held", st, err)
	}
	if data, _ := json.Marshal(st); string(data) != `{"held":false}` {
		t.Errorf("JSON of a lock not held = %s", data)
	}
	if err := l.Check(t.Context(), ""); err != nil {
		t.Errorf("Check of an expired lock: %v", err)
	}
	// Anyone may take it now, with a new token; the old one is dead.
	bob := acquire(t, l, "bob", "", time.Minute, old.Token)
	if bob.Token == old.Token || !bob.AcquiredAt.Equal(c.Now()) {
		t.Errorf("acquire after expiry = %+v: want a fresh lock and token", bob)
	}
	wantCode(t, "Check with the expired lock's token", l.Check(t.Context(), old.Token), berth.ECodeLocked, "")
	// The same holder after its own lock expired gets a fresh token too.
	c.Advance(time.Minute)
	again := acquire(t, l, "bob", "", time.Minute, "")
	if again.Token == bob.Token {
		t.Error("re-acquiring an expired lock kept its token")
	}
}

func TestRelease(t *testing.T) {
	t.Parallel()
	l, c := newLock(t)
	mine := acquire(t, l, "alice", "", time.Minute, "")

	_, err := l.Release(t.Context(), "", false)
	wantCode(t, "release without a token", err, berth.ECodeForbidden, "token")
	_, err = l.Release(t.Context(), arbiter.NewToken(), false)
	wantCode(t, "release with a wrong token", err, berth.ECodeForbidden, "token")
	if err := l.Check(t.Context(), ""); err == nil {
		t.Fatal("a refused release ended the lock")
	}

	released, err := l.Release(t.Context(), mine.Token, false)
	if err != nil || !released {
		t.Fatalf("Release with the token = %v, %v; want true", released, err)
	}
	if st, _ := l.Status(t.Context()); st.Held {
		t.Fatalf("released lock still held: %+v", st)
	}
	// Releasing what is not held succeeds, whatever the token.
	for _, token := range []string{"", mine.Token, "nonsense"} {
		if released, err := l.Release(t.Context(), token, false); err != nil || released {
			t.Errorf("Release(%q) of no lock = %v, %v; want false, nil", token, released, err)
		}
	}

	// force: the human override, no token.
	acquire(t, l, "bob", "", time.Minute, "")
	if released, err := l.Release(t.Context(), "", true); err != nil || !released {
		t.Fatalf("forced release = %v, %v", released, err)
	}
	if released, err := l.Release(t.Context(), "", true); err != nil || released {
		t.Fatalf("forced release of no lock = %v, %v", released, err)
	}

	// An expired lock is released by anyone, reporting false.
	acquire(t, l, "carol", "", time.Second, "")
	c.Advance(2 * time.Second)
	if released, err := l.Release(t.Context(), "wrong", false); err != nil || released {
		t.Fatalf("release of an expired lock = %v, %v", released, err)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	l, _ := newLock(t)
	if err := l.Check(t.Context(), ""); err != nil {
		t.Fatalf("Check with no lock: %v", err)
	}
	if err := l.Check(t.Context(), "anything"); err != nil {
		t.Fatalf("Check with no lock and a token: %v", err)
	}
	mine := acquire(t, l, "alice", "", time.Minute, "")
	if err := l.Check(t.Context(), mine.Token); err != nil {
		t.Errorf("Check with the token: %v", err)
	}
	for _, token := range []string{"", arbiter.NewToken(), mine.Token[:63], mine.Token + "0"} {
		err := l.Check(t.Context(), token)
		wantCode(t, fmt.Sprintf("Check(%q)", token), err, berth.ECodeLocked, "")
	}
}

// TestPersistence reopens the store from its file: the lock is still held
// (and its TTL still bounds it), by a new Lock over the new store.
func TestPersistence(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "berth.db")
	c := newClock(t0)
	first, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	l := arbiter.NewLock(first)
	l.Now = c.Now
	mine := acquire(t, l, "alice", "across restarts", 10*time.Minute, "")
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	l = arbiter.NewLock(openStore(t, path))
	l.Now = c.Now
	c.Advance(time.Minute)
	st, err := l.Status(t.Context())
	want := berth.SwapLockState{Held: true, Holder: "alice", ExpiresAt: t0.Add(10 * time.Minute), SecondsRemaining: 540, Note: "across restarts"}
	if err != nil || st != want {
		t.Fatalf("Status after reopening = %+v, %v; want %+v", st, err, want)
	}
	wantCode(t, "Check without the token after reopening", l.Check(t.Context(), ""), berth.ECodeLocked, "")
	if err := l.Check(t.Context(), mine.Token); err != nil {
		t.Fatalf("Check with the token after reopening: %v", err)
	}
	ext := acquire(t, l, "alice", "", 10*time.Minute, mine.Token)
	if ext.Token != mine.Token {
		t.Error("extension after reopening changed the token")
	}
	c.Advance(11 * time.Minute)
	if st, _ := l.Status(t.Context()); st.Held {
		t.Fatalf("after its TTL the reopened lock is still held: %+v", st)
	}
}

// TestOneWinner races holders for the lock, through separate Lock values
// over one store (as separate servers would): exactly one gets it.
func TestOneWinner(t *testing.T) {
	t.Parallel()
	st := openStore(t, filepath.Join(t.TempDir(), "berth.db"))
	const n = 8
	var wg sync.WaitGroup
	var won, lost atomic.Int32
	for i := range n {
		wg.Go(func() {
			l := arbiter.NewLock(st)
			_, err := l.Acquire(context.Background(), fmt.Sprintf("holder-%d", i), "", time.Minute, "")
			if err == nil {
				won.Add(1)
			} else if berth.ErrorCode(err) == berth.ECodeConflict {
				lost.Add(1)
			} else {
				t.Errorf("Acquire: %v", err)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 || lost.Load() != n-1 {
		t.Fatalf("%d acquired and %d were refused; want 1 and %d", won.Load(), lost.Load(), n-1)
	}
}
