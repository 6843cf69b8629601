package audit

import (
	"encoding/json"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestAppendRecordIsMarshal holds appendRecord to encoding/json's output,
// byte for byte, for records of any strings: the hash chain covers the
// exact bytes, and Verify reads them back with encoding/json.
func TestAppendRecordIsMarshal(t *testing.T) {
	t.Parallel()
	text := rapid.OneOf(rapid.String(), rapid.StringOf(rapid.RuneFrom([]rune{'"', '\\', '<', '>', '&', '\n', '\t', 0, 0x1f, '\u2028', '\u2029', 'é', 'a'})),
		rapid.Custom(func(t *rapid.T) string { return string(rapid.SliceOf(rapid.Byte()).Draw(t, "bytes")) }))
	rapid.Check(t, func(t *rapid.T) {
		r := Record{
			Seq:    rapid.Uint64().Draw(t, "seq"),
			Time:   time.Unix(0, rapid.Int64Range(0, 1<<62).Draw(t, "time")).UTC(),
			Action: text.Draw(t, "action"),
			Actor:  text.Draw(t, "actor"),
			Role:   text.Draw(t, "role"),
			Target: text.Draw(t, "target"),
			Fields: rapid.MapOf(text, text).Draw(t, "fields"),
			Prev:   text.Draw(t, "prev"),
		}
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendRecord(nil, &r); string(got) != string(want) {
			t.Fatalf("appendRecord:\n got %s\nwant %s", got, want)
		}
	})
}
