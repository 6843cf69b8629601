// Package redact hides secret values in text a job writes (its logs,
// error messages) before it leaves the machine or is shown.
package redact

import (
	"slices"
	"sort"
	"strings"
)

// Redaction is what replaces a secret value in redacted text.
const Redaction = "***"

// Redactor replaces secret values in text with "***". Every byte covered by
// an occurrence of any value is hidden, overlapping occurrences included;
// each maximal run of hidden bytes becomes one "***". A *Redactor is
// immutable and safe for concurrent use; a nil *Redactor redacts nothing.
type Redactor struct {
	values []string // non-empty, distinct, longest first
	maxLen int
}

// NewRedactor returns a Redactor for values; empty values are ignored. It
// never fails.
func NewRedactor(values []string) *Redactor {
	r := &Redactor{}
	for _, v := range values {
		if v != "" && !slices.Contains(r.values, v) {
			r.values = append(r.values, v)
			r.maxLen = max(r.maxLen, len(v))
		}
	}
	sort.SliceStable(r.values, func(i, j int) bool { return len(r.values[i]) > len(r.values[j]) })
	return r
}

type span struct{ start, end int }

// runs returns the maximal runs of bytes of s covered by some value, sorted.
// Occurrences that merely touch stay separate runs.
func (r *Redactor) runs(s string) []span {
	var spans []span
	for _, v := range r.values {
		for i := 0; i+len(v) <= len(s); {
			j := strings.Index(s[i:], v)
			if j < 0 {
				break
			}
			spans = append(spans, span{i + j, i + j + len(v)})
			i += j + 1
		}
	}
	if len(spans) == 0 {
		return nil
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	out := spans[:1]
	for _, sp := range spans[1:] {
		last := &out[len(out)-1]
		if sp.start < last.end {
			last.end = max(last.end, sp.end)
			continue
		}
		out = append(out, sp)
	}
	return out
}

func redactRuns(b *strings.Builder, s string, runs []span) {
	prev := 0
	for _, sp := range runs {
		b.WriteString(s[prev:sp.start])
		b.WriteString(Redaction)
		prev = sp.end
	}
	b.WriteString(s[prev:])
}

// Redact returns s with every occurrence of every value replaced. It never
// fails.
func (r *Redactor) Redact(s string) string {
	if r == nil || len(r.values) == 0 {
		return s
	}
	runs := r.runs(s)
	if runs == nil {
		return s
	}
	var b strings.Builder
	redactRuns(&b, s, runs)
	return b.String()
}

// Mask overwrites with '*', in place, every byte of output that a value
// covers, keeping its length (so that offsets into the file it was read
// from stay right). It returns how many leading bytes are settled: all of
// them when final (no more output follows), else none from where a value
// may begin that continues past output. A nil Redactor masks nothing. It
// never fails.
func (r *Redactor) Mask(output []byte, final bool) int {
	if r == nil || len(r.values) == 0 {
		return len(output)
	}
	cut := len(output)
	if !final {
		cut = max(0, len(output)-(r.maxLen-1))
	}
	for _, sp := range r.runs(string(output)) {
		for k := sp.start; k < sp.end; k++ {
			output[k] = '*'
		}
		if sp.start < cut && cut < sp.end {
			cut = sp.end // masked whole: settled
		}
	}
	return cut
}
