package main

import (
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/berth-dev/berth"
)

// splitGlobals takes the client flags given before the command (berth
// --server URL -o json jobs) off args. They are the flags of
// addClientFlags, the one definition: Run gives them to the command ahead
// of its own arguments, so that the command parses them as if they
// followed its name, and a command that talks to no server refuses them
// as it refuses any flag it lacks.
func (m *Main) splitGlobals(args []string) (globals, rest []string, err error) {
	fs := flag.NewFlagSet("berth", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	fs.Usage = func() { writeUsage(fs.Output()) }
	m.addClientFlags(fs, true)
	if err := parse(fs, args); err != nil {
		return nil, nil, err
	}
	rest = fs.Args()
	globals = args[:len(args)-len(rest)]
	if n := len(globals); n > 0 && globals[n-1] == "--" {
		globals = globals[:n-1]
	}
	return globals, rest, nil
}

// withGlobals puts the flags given before the command ahead of args, a
// (sub)command's own arguments.
func (m *Main) withGlobals(args []string) []string {
	return append(slices.Clip(m.globals), args...)
}

// repeatableMark ends the usage of a flag that may be given more than once
// (--env K=V --env K2=V2); any other flag given twice is an error.
const repeatableMark = "(repeatable)"

// checkRepeats refuses a single-value flag that the flags at the start of
// args (up to the first argument that is no flag, or "--") give twice, or
// give again after an earlier parse of fs set it (a flag both before and
// after the command).
func checkRepeats(fs *flag.FlagSet, args []string) error {
	given := givenFlags(fs)
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			return nil
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		if f == nil {
			return nil // the parse names it
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !hasValue && !(ok && b.IsBoolFlag()) {
			i++ // its value
		}
		if strings.HasSuffix(f.Usage, repeatableMark) {
			continue
		}
		if given[name] {
			return berth.Invalidf(flagName(name), "given more than once; give it once")
		}
		given[name] = true
	}
	return nil
}

// suggest returns " (did you mean X?)" for the candidate closest to s by
// edit distance, when one is close enough to be a typo, else "".
func suggest(s string, candidates []string) string {
	typed := strings.TrimLeft(s, "-")
	best, bestD := "", 2 // a typo of a short name changes one character
	if len(typed) > 5 {
		bestD = 3
	}
	for _, c := range candidates {
		if d := editDistance(typed, strings.TrimLeft(c, "-")); d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

// editDistance is the optimal string alignment distance between a and b:
// the insertions, deletions, substitutions and swaps of neighbours that
// turn one into the other ("jbos" is one from "jobs").
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// flagNames returns the names of fs's flags as they are typed: -o,
// --server.
func flagNames(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, flagName(f.Name)) })
	return names
}
