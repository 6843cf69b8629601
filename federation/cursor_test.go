package federation

import (
	"errors"
	"testing"

	"github.com/berth-dev/berth"
)

func TestCursorRoundTrip(t *testing.T) {
	for _, c := range []berth.ChangeCursor{
		{},
		{Epoch: "01JQ8Z5Y2W3X4V5T6S7R8Q9P0N", Seq: 42, Tag: "0a1b2c3d"},
		{Epoch: "e_1-x", Seq: 0},
		{Epoch: "e", Seq: 1<<64 - 1, Tag: "ffffffff"},
	} {
		s := FormatCursor(c)
		got, err := ParseCursor(s)
		if err != nil || got != c {
			t.Errorf("ParseCursor(FormatCursor(%+v) = %q) = %+v, %v", c, s, got, err)
		}
	}
	if s := FormatCursor(berth.ChangeCursor{}); s != "" {
		t.Errorf("the zero cursor is %q, want \"\"", s)
	}
	if s := FormatCursor(berth.ChangeCursor{Epoch: "e", Seq: 7, Tag: "ab"}); s != "e.7.ab" {
		t.Errorf("FormatCursor = %q, want e.7.ab", s)
	}
}

func TestParseCursorRefusesWhatNoPeerIssued(t *testing.T) {
	for _, s := range []string{
		"e", "e.1", "e.1.t.x", ".1.t", "e..t", "e.x.t", "e.-1.t", "e.+1.t", "e.01.t",
		"e.18446744073709551616.t", "e.1.t!", "e f.1.t", "e.1.tag with space",
	} {
		c, err := ParseCursor(s)
		var be *berth.Error
		if !errors.As(err, &be) || be.Code != berth.ECodeInvalid || be.Field != "cursor" {
			t.Errorf("ParseCursor(%q) = %+v, %v; want an invalid error on field cursor", s, c, err)
		}
		if c != (berth.ChangeCursor{}) {
			t.Errorf("ParseCursor(%q) returned %+v with its error", s, c)
		}
	}
}
