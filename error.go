// Package berth holds Berth's domain: jobs, attempts, workers, their states,
// the validation rules for what users submit, and the one error type every
// layer returns. It depends on the standard library only.
package berth

import (
	"errors"
	"fmt"
)

// Error codes. The api package maps each to an HTTP status; nothing else does.
const (
	ECodeInvalid       = "invalid"           // 400: a field breaks a rule
	ECodeUnauthorized  = "unauthorized"      // 401: no or wrong token
	ECodeForbidden     = "forbidden"         // 403
	ECodeNotFound      = "not_found"         // 404
	ECodeConflict      = "conflict"          // 409: the object is in the wrong state
	ECodeUnsatisfiable = "unsatisfiable"     // 409: no worker the cluster has or could get could ever run the job
	ECodeLocked        = "locked"            // 423
	ECodeTooLarge      = "too_large"         // 413: a request body over the limit
	ECodeTooMany       = "too_many_requests" // 429
	ECodeUnavailable   = "unavailable"       // 503: shutting down or store failing
	ECodeInternal      = "internal"          // 500
)

// Error is the one error type users see. Field names the offending input
// field (JSON name) when there is one. Err, when set, is the cause, in the
// manner of Litestream's LTXError: Error's text ends with it, errors.Is and
// errors.As see through to it (Unwrap), and Message is the context before
// it ("" when the cause says it all). Err is not encoded: the api package
// sends Text as the message of a 4xx answer, and only Message for a 5xx,
// logging the cause.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	Err     error  `json:"-"`
}

// Error returns "field: message: cause", leaving out the parts that are
// empty.
func (e *Error) Error() string {
	if e.Field != "" {
		return e.Field + ": " + e.Text()
	}
	return e.Text()
}

// Text returns the message and the cause's text after it ("read: unexpected
// EOF"), or whichever of the two there is: the error without its field.
func (e *Error) Text() string {
	switch {
	case e.Err == nil:
		return e.Message
	case e.Message == "":
		return e.Err.Error()
	}
	return e.Message + ": " + e.Err.Error()
}

// Unwrap returns the cause, nil when there is none.
func (e *Error) Unwrap() error { return e.Err }

// WithCause sets e's cause to err and returns e, for chaining onto Errorf
// and Invalidf: Invalidf("body", "read").WithCause(err).
func (e *Error) WithCause(err error) *Error {
	e.Err = err
	return e
}

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Invalidf returns an ECodeInvalid *Error naming field.
func Invalidf(field, format string, args ...any) *Error {
	return &Error{Code: ECodeInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the *Error in err's chain, or ECodeInternal.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ECodeInternal
}
