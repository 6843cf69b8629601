package berth

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestParseCursor checks that every id IDGen makes is a cursor that names
// itself, that an empty cursor is the first page, and that anything else
// is an invalid error naming the cursor.
func TestParseCursor(t *testing.T) {
	t.Parallel()
	if got, err := ParseCursor(""); got != "" || err != nil {
		t.Errorf(`ParseCursor("") = %q, %v; want the first page`, got, err)
	}
	var g IDGen
	now := time.Unix(1_700_000_000, 0)
	valid := []string{g.New(now), g.New(now), g.New(now.Add(time.Hour)), g.New(time.UnixMilli(0)),
		g.New(time.UnixMilli(1<<48 - 1)), "7ZZZZZZZZZZZZZZZZZZZZZZZZZ", "00000000000000000000000000"}
	for _, id := range valid {
		if got, err := ParseCursor(id); got != id || err != nil {
			t.Errorf("ParseCursor(%q) = %q, %v; want the id back", id, got, err)
		}
	}
	id := valid[0]
	for _, bad := range []string{
		"garbage",
		strings.ToLower(id), // not what the server issues, and sorts after every id
		id[:25],             // short
		id + "0",            // long
		"8" + id[1:],        // a timestamp past 48 bits
		id[:25] + "U",       // U, I, L and O are not Crockford digits
		id[:25] + "I",
		" " + id[1:],
		id[:13] + "/" + id[14:],
		strings.Repeat("\u00e9", 13), // 26 bytes, not 26 digits
	} {
		got, err := ParseCursor(bad)
		var e *Error
		if !errors.As(err, &e) || e.Code != ECodeInvalid || e.Field != "cursor" ||
			!strings.Contains(e.Message, "not a cursor this server issued") || got != "" {
			t.Errorf("ParseCursor(%q) = %q, %v; want an invalid error naming cursor", bad, got, err)
		}
	}
}
