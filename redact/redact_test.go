package redact

import (
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	r := NewRedactor([]string{"abc", "", "abcdef", "xyz", "abc", "ab"})
	tests := []struct{ in, want string }{
		{"nothing here", "nothing here"},
		{"key=abcdef;", "key=***;"},
		{"abc abc", "*** ***"},
		{"abcxyz", "******"},  // touching values stay separate
		{"abxyzc", "******c"}, // "ab" and "xyz" touch
		{"zabcdefz", "z***z"}, // longest wins
		{"ab", "***"},         // short values are redacted too
		{"aaab", "aa***"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := r.Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	overlap := NewRedactor([]string{"abcd", "cdef"})
	if got := overlap.Redact("xabcdefx"); got != "x***x" {
		t.Errorf("overlapping values: %q, want every covered byte hidden", got)
	}
	var none *Redactor
	if got := none.Redact("abc"); got != "abc" {
		t.Errorf("nil Redactor changed text: %q", got)
	}
	if got := NewRedactor(nil).Redact("abc"); got != "abc" {
		t.Errorf("empty Redactor changed text: %q", got)
	}
}

// shipMasked ships input the way the agent does: it reads from the file
// what has been written so far (input[:written]) from the last shipped
// offset, masks it and ships what Mask says is final.
func shipMasked(r *Redactor, input string, writes []int) string {
	var shipped []byte
	for k, written := range writes {
		buf := []byte(input[len(shipped):written])
		n := r.Mask(buf, k == len(writes)-1)
		shipped = append(shipped, buf[:n]...)
	}
	return string(shipped)
}

func TestMaskSplitAcrossReads(t *testing.T) {
	t.Parallel()
	secrets := []string{"hf_SECRET_TOKEN", "p4ss", "aaaa"}
	r := NewRedactor(secrets)
	input := "token=hf_SECRET_TOKEN pass=p4ss p4sp4ss aaaaaa hf_SECRET_TOKENhf_SECRET_TOKEN end"
	whole := []byte(input)
	if n := r.Mask(whole, true); n != len(input) {
		t.Fatalf("final Mask = %d, want all %d bytes", n, len(input))
	}
	for _, s := range secrets {
		if strings.Contains(string(whole), s) {
			t.Fatalf("Mask leaves %q in %q", s, whole)
		}
	}
	if len(whole) != len(input) || !strings.HasPrefix(string(whole), "token=***************") {
		t.Fatalf("Mask must keep the length and hide each byte: %q", whole)
	}
	// The output written in two, then three, pieces: what is shipped is
	// what masking the whole gives, whatever the cuts.
	for i := 0; i <= len(input); i++ {
		for j := i; j <= len(input); j += 7 {
			if got := shipMasked(r, input, []int{i, j, len(input)}); got != string(whole) {
				t.Fatalf("written up to %d, %d, %d: shipped %q, want %q", i, j, len(input), got, whole)
			}
		}
	}
}

func TestMaskHoldsBackWhatMayBeASecret(t *testing.T) {
	t.Parallel()
	r := NewRedactor([]string{"0123456789"})
	buf := []byte(strings.Repeat("x", 100) + "01234")
	if n := r.Mask(buf, false); n != 105-9 {
		t.Errorf("Mask = %d, want all but the last 9 bytes (longest value - 1) = %d", n, 105-9)
	}
	var none *Redactor
	if n := none.Mask(buf, false); n != len(buf) {
		t.Errorf("a nil Redactor's Mask = %d, want %d", n, len(buf))
	}
}
