package berth_test

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	"github.com/berth-dev/berth"
)

// TestErrorCause: errors.Is and errors.As see through a *berth.Error to its
// cause, and its text is "field: message: cause" without the empty parts.
func TestErrorCause(t *testing.T) {
	t.Parallel()
	cause := &fs.PathError{Op: "open", Path: "/data/berth.db", Err: syscall.EIO}
	for _, c := range []struct {
		err  *berth.Error
		text string
	}{
		{berth.Errorf(berth.ECodeUnavailable, "store failed").WithCause(cause), "store failed: open /data/berth.db: input/output error"},
		{berth.Invalidf("body", "read").WithCause(cause), "body: read: open /data/berth.db: input/output error"},
		{&berth.Error{Code: berth.ECodeInvalid, Field: "--catalog", Err: cause}, "--catalog: open /data/berth.db: input/output error"},
	} {
		wrapped := fmt.Errorf("context: %w", c.err)
		if !errors.Is(wrapped, syscall.EIO) {
			t.Errorf("%v: errors.Is(EIO) = false", c.err)
		}
		var pe *fs.PathError
		if !errors.As(wrapped, &pe) || pe != cause {
			t.Errorf("%v: errors.As(*fs.PathError) does not find the cause", c.err)
		}
		if got := berth.ErrorCode(wrapped); got != c.err.Code {
			t.Errorf("%v: ErrorCode = %q, want %q", c.err, got, c.err.Code)
		}
		if got := c.err.Error(); got != c.text {
			t.Errorf("Error() = %q, want %q", got, c.text)
		}
	}
	plain := berth.Invalidf("cron", "must have five fields")
	if plain.Unwrap() != nil || plain.Error() != "cron: must have five fields" || plain.Text() != "must have five fields" {
		t.Errorf("an error without a cause: %q, text %q, cause %v", plain.Error(), plain.Text(), plain.Unwrap())
	}
}
