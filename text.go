package berth

import (
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Truncate returns s cut to at most n bytes, at the start of a rune, so
// that no UTF-8 sequence is split.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Clip returns s, or when it is longer than n bytes, s cut as Truncate
// does with "…" after it, to show a long text shortened.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return Truncate(s, n) + "…"
}

// ShellQuote returns s as one word for sh: as it is when it holds only
// letters, digits and @%+=:,./_-, else in single quotes.
func ShellQuote(s string) string {
	if s != "" && strings.Trim(s, shellSafe) == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

const shellSafe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./_-"

// Count writes n of noun, singular for exactly one: "1 GPU", "2 GPUs",
// "0 GPUs", "0.5 CPUs".
func Count[N ~int | ~float64](n N, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.FormatFloat(float64(n), 'g', -1, 64) + " " + noun + "s"
}

// ansiEscape matches ANSI escape sequences: CSI (colours, cursor moves),
// OSC (titles, links) and two-byte escapes.
var ansiEscape = regexp.MustCompile(`\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])`)

// StripANSI returns s without ANSI escape sequences (the colours of a
// program's log, as vLLM writes it).
func StripANSI(s string) string {
	if !strings.Contains(s, "\x1b") {
		return s
	}
	return ansiEscape.ReplaceAllString(s, "")
}
