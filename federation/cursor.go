// Package federation is the pure core of federation (docs/federation.md):
// the change cursor's text form, the peer's answer to a changes pull, the
// origin's reconciliation of an answer with the handles it holds, the
// changelog's prune rule and the routing of a job to a peer. It reads no
// clock, starts no goroutine and speaks no HTTP: the controller and the
// API call it with what they hold.
package federation

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/berth-dev/berth"
)

var (
	epochRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	tagRe   = regexp.MustCompile(`^[A-Za-z0-9]{0,32}$`)
)

// ParseCursor decodes the cursor query parameter of a changes pull,
// "EPOCH.SEQ.TAG" (FormatCursor); "" is the zero cursor, which asks for a
// full resync. Anything else is an ECodeInvalid *berth.Error naming the
// field "cursor".
func ParseCursor(s string) (berth.ChangeCursor, error) {
	if s == "" {
		return berth.ChangeCursor{}, nil
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return berth.ChangeCursor{}, badCursor(s)
	}
	seq, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil || !epochRe.MatchString(parts[0]) || !tagRe.MatchString(parts[2]) || parts[1] != strconv.FormatUint(seq, 10) {
		return berth.ChangeCursor{}, badCursor(s)
	}
	return berth.ChangeCursor{Epoch: parts[0], Seq: seq, Tag: parts[2]}, nil
}

// badCursor is ParseCursor's refusal of s.
func badCursor(s string) *berth.Error {
	return berth.Invalidf("cursor", "%q is not a cursor this peer issued: give the cursor of the last answer (EPOCH.SEQ.TAG), or none for a full resync", s)
}

// FormatCursor encodes c as ParseCursor reads it: "EPOCH.SEQ.TAG", or ""
// for the zero cursor.
func FormatCursor(c berth.ChangeCursor) string {
	if c == (berth.ChangeCursor{}) {
		return ""
	}
	return c.Epoch + "." + strconv.FormatUint(c.Seq, 10) + "." + c.Tag
}
