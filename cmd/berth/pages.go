package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/berth-dev/berth"
)

// pageFlags is --cursor of a listing the server answers a page at a time:
// where the page starts, and how to ask for the next one.
type pageFlags struct {
	fs     *flag.FlagSet
	cursor string
}

// addPageFlags adds --cursor to fs, the flags of a paged listing.
func addPageFlags(fs *flag.FlagSet) *pageFlags {
	p := &pageFlags{fs: fs}
	fs.StringVar(&p.cursor, "cursor", "", "list the page after the one whose \"more:\" line (on stderr) gave this cursor")
	return p
}

// serverError returns err, or for the server's invalid error about the
// cursor query parameter the same error naming --cursor.
func (p *pageFlags) serverError(err error) error {
	var be *berth.Error
	if errors.As(err, &be) && be.Code == berth.ECodeInvalid && be.Field == "cursor" {
		return berth.Invalidf("--cursor", "%s", be.Message)
	}
	return err
}

// printNext writes to w, when next (the server's next_cursor) is set, the
// command that lists the next page: "more: berth CMD FLAGS --cursor NEXT",
// FLAGS being every flag given but --cursor, quoted for a shell, so that the
// line can be pasted. On the last page it writes nothing.
func (p *pageFlags) printNext(w io.Writer, next string) {
	if next == "" {
		return
	}
	args := []string{p.fs.Name()}
	p.fs.Visit(func(f *flag.Flag) {
		if f.Name != "cursor" {
			args = append(args, flagArgs(f)...)
		}
	})
	args = append(args, "--cursor", berth.ShellQuote(next))
	fmt.Fprintln(w, "more:", strings.Join(args, " "))
}

// flagArgs writes flag f with its value as command-line arguments: a bool
// flag as one (--name=true), any other as two (--name VALUE).
func flagArgs(f *flag.Flag) []string {
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return []string{flagName(f.Name) + "=" + f.Value.String()}
	}
	return []string{flagName(f.Name), berth.ShellQuote(f.Value.String())}
}
