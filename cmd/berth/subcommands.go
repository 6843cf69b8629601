package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// subcommands is a command made of named subcommands, such as berth quota.
type subcommands struct {
	name string
	help string // printed for "help", -h and --help
	run  map[string]func(ctx context.Context, m *Main, args []string) error
}

// dispatch runs the subcommand named by args[0] with the rest of args.
// The client flags given before the command (m.globals, ahead of args)
// go to the subcommand.
func (s subcommands) dispatch(ctx context.Context, m *Main, args []string) error {
	args = args[len(m.globals):]
	sorted := slices.Sorted(maps.Keys(s.run))
	if m.subcommandsSeen != nil {
		*m.subcommandsSeen = sorted
		return flag.ErrHelp
	}
	names := strings.Join(sorted, ", ")
	if len(args) == 0 {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("%s: give a subcommand: %s (see berth %s help)", s.name, names, s.name)}
	}
	if args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(m.Stdout, s.help)
		return nil
	}
	run, ok := s.run[args[0]]
	if !ok {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("%s: unknown subcommand %q%s (%s)", s.name, args[0], suggest(args[0], sorted), names)}
	}
	return run(ctx, m, m.withGlobals(args[1:]))
}
