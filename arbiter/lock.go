// Package arbiter is the GPU arbiter's coordination layer of seed 000
// (Spark Control): the swap reservation lock that automation takes before
// it swaps models, the registry of schedules that will touch the GPUs, and
// a cron parser for their timing. Both are kept in the store, so that they
// survive a restart and are shared by the servers of one database.
package arbiter

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/berth-dev/berth"
)

// LockStore keeps the swap lock; store.Store implements it.
type LockStore interface {
	// SwapLock returns the stored lock, expired or not; none is
	// ECodeNotFound.
	SwapLock(ctx context.Context) (*berth.SwapLock, error)
	// PutSwapLock stores l in place of the stored lock whose token is prev
	// ("" where none is stored), else returns ECodeConflict.
	PutSwapLock(ctx context.Context, l *berth.SwapLock, prev string) error
	// DeleteSwapLock deletes the stored lock whose token is token (any
	// when ""), reporting whether it deleted one.
	DeleteSwapLock(ctx context.Context, token string) (bool, error)
}

// Limits on what a lock's holder and note may hold.
const (
	MaxHolderLen = 256
	MaxNoteLen   = 4096
)

// casTries bounds how often one call re-reads the lock after another
// writer changed it between the read and the write.
const casTries = 16

// Lock is the swap reservation lock (seed 000 §1): a TTL-bounded
// reservation of the swap path by one holder, which a secret token
// authorises. The store is the only state: every Lock over the same store
// (of one server or of several sharing a database) sees the same lock, and
// writes are compare-and-set, so two holders never both acquire it. A
// stored lock past its expiry counts as not held. Its methods are safe for
// concurrent use.
type Lock struct {
	// Now is the clock (time.Now by default).
	Now func() time.Time

	store LockStore
}

// NewLock returns the swap lock kept in s.
func NewLock(s LockStore) *Lock { return &Lock{Now: time.Now, store: s} }

// current returns the stored lock, nil when none is stored.
func (l *Lock) current(ctx context.Context) (*berth.SwapLock, error) {
	cur, err := l.store.SwapLock(ctx)
	if berth.ErrorCode(err) == berth.ECodeNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return cur, nil
}

// Acquire takes the lock for holder for ttl (clamped to [1 s, 86400 s])
// with note, or extends it, and returns the lock's state as the holder
// sees it: with acquired_at and the token.
//
// When the lock is not held (none, released or expired) holder gets it
// with a new token. When holder holds it, token must be its token: the
// token is kept, the window slides forward (expiry now + ttl; acquired_at
// stays), and a non-empty note replaces the note. Errors: an empty or
// over-long holder, or an over-long note, is ECodeInvalid; another holder
// holding it is ECodeConflict, returned together with the lock's current
// state (as Status gives it); the same holder without the right token is
// ECodeForbidden (field "token"); a store failure is returned wrapped.
func (l *Lock) Acquire(ctx context.Context, holder, note string, ttl time.Duration, token string) (berth.SwapLockState, error) {
	if err := checkText("holder", holder, MaxHolderLen, true); err != nil {
		return berth.SwapLockState{}, err
	}
	if err := checkText("note", note, MaxNoteLen, false); err != nil {
		return berth.SwapLockState{}, err
	}
	ttl = berth.ClampSwapLockTTL(ttl)
	for range casTries {
		cur, err := l.current(ctx)
		if err != nil {
			return berth.SwapLockState{}, fmt.Errorf("acquire swap lock: %w", err)
		}
		now := l.Now()
		var next berth.SwapLock
		switch {
		case !cur.HeldAt(now):
			next = berth.SwapLock{Holder: holder, Note: note, Token: NewToken(), AcquiredAt: now, ExpiresAt: now.Add(ttl)}
		case cur.Holder != holder:
			return cur.StateAt(now), &berth.Error{Code: berth.ECodeConflict, Field: "holder",
				Message: fmt.Sprintf("the swap lock is held by %s until %s (%ds left)", cur.Holder,
					berth.FormatSparkTime(cur.ExpiresAt), cur.StateAt(now).SecondsRemaining)}
		case token == "":
			return berth.SwapLockState{}, &berth.Error{Code: berth.ECodeForbidden, Field: "token",
				Message: fmt.Sprintf("%s already holds the swap lock; to extend it, send its token in %s or ?token=",
					holder, berth.SwapLockTokenHeader)}
		case !sameToken(token, cur.Token):
			return berth.SwapLockState{}, &berth.Error{Code: berth.ECodeForbidden, Field: "token",
				Message: fmt.Sprintf("the token is not that of the swap lock %s holds", holder)}
		default:
			next = *cur
			next.ExpiresAt = now.Add(ttl)
			if note != "" {
				next.Note = note
			}
		}
		prev := ""
		if cur != nil {
			prev = cur.Token
		}
		err = l.store.PutSwapLock(ctx, &next, prev)
		if berth.ErrorCode(err) == berth.ECodeConflict {
			continue // changed since read: decide again
		}
		if err != nil {
			return berth.SwapLockState{}, fmt.Errorf("acquire swap lock: %w", err)
		}
		st := next.StateAt(now)
		st.AcquiredAt, st.Token = next.AcquiredAt, next.Token
		return st, nil
	}
	return berth.SwapLockState{}, berth.Errorf(berth.ECodeUnavailable, "acquire swap lock: it kept changing meanwhile; try again")
}

// Status returns the lock's public state: {held:false}, or who holds it,
// until when and the note, never the token. It returns a store failure
// wrapped.
func (l *Lock) Status(ctx context.Context) (berth.SwapLockState, error) {
	cur, err := l.current(ctx)
	if err != nil {
		return berth.SwapLockState{}, fmt.Errorf("read swap lock: %w", err)
	}
	return cur.StateAt(l.Now()), nil
}

// Release ends the lock and reports whether a held lock ended. With force
// (the human override) it ends whatever lock there is, without a token.
// Otherwise token must be the held lock's: a missing or wrong one is
// ECodeForbidden (field "token") and changes nothing. Releasing a lock
// that is not held (none, or expired) succeeds and reports false. A store
// failure is returned wrapped.
func (l *Lock) Release(ctx context.Context, token string, force bool) (bool, error) {
	for range casTries {
		cur, err := l.current(ctx)
		if err != nil {
			return false, fmt.Errorf("release swap lock: %w", err)
		}
		held := cur.HeldAt(l.Now())
		switch {
		case cur == nil:
			return false, nil
		case held && !force && token == "":
			return false, &berth.Error{Code: berth.ECodeForbidden, Field: "token",
				Message: fmt.Sprintf("releasing the swap lock %s holds needs its token (%s or ?token=), or force=true",
					cur.Holder, berth.SwapLockTokenHeader)}
		case held && !force && !sameToken(token, cur.Token):
			return false, &berth.Error{Code: berth.ECodeForbidden, Field: "token",
				Message: fmt.Sprintf("the token does not match the swap lock %s holds", cur.Holder)}
		}
		// The token of the lock read: a lock taken since is not ours to end.
		deleted, err := l.store.DeleteSwapLock(ctx, cur.Token)
		if err != nil {
			return false, fmt.Errorf("release swap lock: %w", err)
		}
		if deleted {
			return held, nil
		}
	}
	return false, berth.Errorf(berth.ECodeUnavailable, "release swap lock: it kept changing meanwhile; try again")
}

// Check is the swap path's gate: it returns nil when the lock is not held
// or token is the held lock's, and an ECodeLocked error (423) naming the
// holder when the lock is held and token is missing or wrong. A store
// failure is returned wrapped (the swap must not proceed).
func (l *Lock) Check(ctx context.Context, token string) error {
	cur, err := l.current(ctx)
	if err != nil {
		return fmt.Errorf("check swap lock: %w", err)
	}
	now := l.Now()
	if !cur.HeldAt(now) || (token != "" && sameToken(token, cur.Token)) {
		return nil
	}
	return berth.Errorf(berth.ECodeLocked, "the swap lock is held by %s until %s (%ds left): a swap needs its token in %s",
		cur.Holder, berth.FormatSparkTime(cur.ExpiresAt), cur.StateAt(now).SecondsRemaining, berth.SwapLockTokenHeader)
}

// NewToken returns a new lock token: 32 random bytes in hex.
func NewToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// sameToken compares tokens in constant time.
func sameToken(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// checkText requires s (field) to be valid UTF-8 without control
// characters other than tab and newline, at most max bytes, and, when
// required, not blank.
func checkText(field, s string, maxLen int, required bool) error {
	switch {
	case required && strings.TrimSpace(s) == "":
		return berth.Invalidf(field, "is required")
	case len(s) > maxLen:
		return berth.Invalidf(field, "is %d bytes long; at most %d", len(s), maxLen)
	case !utf8.ValidString(s):
		return berth.Invalidf(field, "is not valid UTF-8")
	case strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 && r != '\t' && r != '\n' || r == 0x7f }):
		return berth.Invalidf(field, "holds a control character")
	}
	return nil
}
