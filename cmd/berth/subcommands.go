package main

import (
	"context"
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
func (s subcommands) dispatch(ctx context.Context, m *Main, args []string) error {
	names := strings.Join(slices.Sorted(maps.Keys(s.run)), ", ")
	if len(args) == 0 {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("%s: give a subcommand: %s (see berth %s help)", s.name, names, s.name)}
	}
	if args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(m.Stdout, s.help)
		return nil
	}
	run, ok := s.run[args[0]]
	if !ok {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("%s: unknown subcommand %q (%s)", s.name, args[0], names)}
	}
	return run(ctx, m, args[1:])
}
