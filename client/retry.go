package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/berth-dev/berth"
)

// DefaultRetryFor is how long Wait, and Logs when it follows, keep trying
// while every try fails for want of a server, when Retry.For is 0.
const DefaultRetryFor = 2 * time.Minute

// maxRetryDelay is the longest pause between two tries.
const maxRetryDelay = 5 * time.Second

// Retry is how Wait, and Logs when it follows, ride out a server restart
// or a failover. After a try that fails for want of a server — none could
// be reached, a connection failed before the answer was read whole
// (refused, reset, EOF), or the answer was 502, 503 (a standby, a server
// shutting down) or 504 — they pause (1 s, doubling, at most 5 s) and try
// again, until tries have failed in a row for For; then they give up with
// an *OutageError. Any other error, a 4xx answer above all, ends them at
// once. The zero value is the default.
type Retry struct {
	// For is how long tries may fail in a row before giving up:
	// DefaultRetryFor when 0; negative: no second try.
	For time.Duration
	// Notify, when set, is called with the error of the first failed try
	// of each outage, before the first pause (a CLI says it is retrying).
	Notify func(err error)
	// Now and Sleep are the clock: time.Now and a timer when nil. Sleep
	// returns ctx's error when ctx ends first.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
}

func (r *Retry) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Retry) sleep(ctx context.Context, d time.Duration) error {
	if r.Sleep != nil {
		return r.Sleep(ctx, d)
	}
	return berth.Sleep(ctx, d)
}

// OutageError is the error of a call that gave up after its tries had
// failed in a row for For for want of a server; Err is the last try's.
type OutageError struct {
	For time.Duration
	Err error
}

func (e *OutageError) Error() string {
	return fmt.Sprintf("no server answered for %s, giving up: %v", e.For, e.Err)
}

func (e *OutageError) Unwrap() error { return e.Err }

// transportError is a failure to talk to a server: it could not be
// reached, or the connection failed before its answer was read whole.
type transportError struct {
	msg string // what failed, naming the server
	err error
}

func (e *transportError) Error() string { return e.msg + ": " + e.err.Error() }

func (e *transportError) Unwrap() error { return e.err }

// statusError is an error answer whose body is not a Berth error (a
// proxy's 502, say).
type statusError struct {
	method, path, status string
	code                 int
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%s %s: server answered %s", e.method, e.path, e.status)
}

// answerBody is the body of an answer, whose read errors (but io.EOF) are
// transport errors: the connection failed before the answer was read whole.
type answerBody struct {
	io.ReadCloser
	server string
}

func (b *answerBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		err = &transportError{msg: "lost the connection to the server at " + b.server, err: err}
	}
	return n, err
}

// transient reports whether err is a failure for want of a server, which
// trying again later may cure (see Retry).
func transient(err error) bool {
	var te *transportError
	var se *statusError
	var be *berth.Error
	switch {
	case errors.As(err, &te):
		return true
	case errors.As(err, &se):
		return se.code == http.StatusBadGateway || se.code == http.StatusServiceUnavailable || se.code == http.StatusGatewayTimeout
	case errors.As(err, &be):
		return be.Code == berth.ECodeUnavailable
	}
	return false
}

// outage counts the tries of one call that have failed in a row.
type outage struct {
	r        *Retry
	deadline time.Time // the call's own, if any: no try after it
	since    time.Time // when the first of the failed tries failed
	failed   int
}

// newOutage starts counting the failed tries of a call that ends after
// timeout (0: no limit).
func newOutage(r *Retry, timeout time.Duration) *outage {
	o := &outage{r: r}
	if timeout > 0 {
		o.deadline = r.now().Add(timeout)
	}
	return o
}

// pause is given the error of a failed try. When trying again may cure it
// and tries have not failed for Retry.For, nor reached the deadline, it
// waits before the next try and returns nil. Else it returns the error to
// give up with: err when trying again cannot cure it, an *OutageError
// when time is up, ctx's error when ctx ends first.
func (o *outage) pause(ctx context.Context, err error) error {
	if ctx.Err() != nil || o.r.For < 0 || !transient(err) {
		return err
	}
	now := o.r.now()
	if o.failed == 0 {
		o.since = now
		if o.r.Notify != nil {
			o.r.Notify(err)
		}
	}
	end := o.since.Add(cmp.Or(o.r.For, DefaultRetryFor))
	if !o.deadline.IsZero() && o.deadline.Before(end) {
		end = o.deadline
	}
	if !now.Before(end) {
		return &OutageError{For: now.Sub(o.since), Err: err}
	}
	o.failed++
	return o.r.sleep(ctx, min(berth.DoublingDelay(o.failed, maxRetryDelay), end.Sub(now)))
}

// answered records a try that got an answer: the next failure starts a
// new outage.
func (o *outage) answered() { o.failed = 0 }

// past reports whether the call's deadline, if any, has passed.
func (o *outage) past() bool {
	return !o.deadline.IsZero() && !o.r.now().Before(o.deadline)
}
