package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/berth-dev/berth"
)

// builtins are the commands Run answers itself, about berth rather than a
// server; their summaries join the commands' in berth help.
var builtins = map[string]string{
	"help":       "print this list, or a command's usage (berth help COMMAND [SUBCOMMAND])",
	"version":    "print berth's version, module version and source commit",
	"completion": "print a shell completion script (bash, zsh or fish)",
}

// commandNames returns every command's name, sorted.
func commandNames() []string {
	names := slices.Collect(maps.Keys(commands))
	names = slices.AppendSeq(names, maps.Keys(builtins))
	slices.Sort(names)
	return names
}

// summary returns what the command name does, in one line.
func summary(name string) string {
	if s, ok := builtins[name]; ok {
		return s
	}
	return commands[name].summary
}

// writeUsage writes berth help: the commands and how flags work.
func writeUsage(w io.Writer) {
	fmt.Fprintln(w, "berth: one control plane for every GPU you own, rent or borrow.\n\nUsage: berth [client flags] COMMAND [flags] [args]\n\nCommands:")
	names := commandNames()
	width := len(slices.MaxFunc(names, func(a, b string) int { return len(a) - len(b) }))
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s  %s\n", width, n, summary(n))
	}
	fmt.Fprintln(w, `
The server is --server, else $BERTH_SERVER, else http://127.0.0.1:7070 (a comma-separated list fails over); the token is $BERTH_TOKEN.
The client flags (--server, --ca, --ca-fingerprint, -o) may come before the command or after it.
Run berth help COMMAND, or berth COMMAND -h, for a command's flags. Exit statuses: 0 done, 1 a job did not
succeed, 2 bad input or refused, 124 timed out, 130 interrupted.`)
}

// help prints the usage of the command args names (a subcommand may
// follow), or the list of commands, to stdout.
func (m *Main) help(ctx context.Context, args []string) error {
	if len(args) == 0 {
		writeUsage(m.Stdout)
		return nil
	}
	if s, ok := builtins[args[0]]; ok {
		fmt.Fprintf(m.Stdout, "Usage: berth %s\n\n%s.\n", args[0], strings.ToUpper(s[:1])+s[1:])
		return nil
	}
	cmd, ok := commands[args[0]]
	if !ok {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("help: unknown command %q%s (see berth help)", args[0], suggest(args[0], commandNames()))}
	}
	out := *m
	out.Stderr = m.Stdout // the usage a command prints for -h
	out.globals = nil
	return cmd.run(ctx, &out, append(slices.Clip(args[1:]), "-h"))
}

// version prints berth's version line.
func (m *Main) version() error {
	info, _ := debug.ReadBuildInfo()
	fmt.Fprintln(m.Stdout, versionLine(Version, info))
	return nil
}

// versionLine says which berth this is: the -ldflags version, the main
// module's version and the source commit it was built from, e.g.
// "berth dev (module (devel), commit 0a1b2c3d4e5f, modified)".
func versionLine(version string, info *debug.BuildInfo) string {
	module, commit, modified := "unknown", "unknown", false
	if info != nil {
		if info.Main.Version != "" {
			module = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value[:min(12, len(s.Value))]
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	line := fmt.Sprintf("berth %s (module %s, commit %s", version, module, commit)
	if modified {
		line += ", modified"
	}
	return line + ")"
}

// hint returns what to add to the line of err for a person at the CLI:
// the flag or variable that cures it. The server's own messages speak
// HTTP, for every client; this speaks berth's flags.
func (m *Main) hint(err error) string {
	if berth.ErrorCode(err) == berth.ECodeUnauthorized {
		switch {
		case m.savedTokenOf != "":
			return fmt.Sprintf("; the token sent is the one saved for %s in %s (berth up saves one): "+
				"if another server runs there now, delete that entry or set BERTH_TOKEN", m.savedTokenOf, m.credentialsPath())
		case m.Getenv("BERTH_TOKEN") != "":
			return "; the server refused the token in $BERTH_TOKEN: set BERTH_TOKEN to a token of this server (berth token create)"
		}
		return "; set BERTH_TOKEN to a token of this server (an admin makes one with berth token create)"
	}
	var unknownCA x509.UnknownAuthorityError
	if errors.As(err, &unknownCA) {
		return "; to trust this server give --ca-fingerprint sha256:HEX (the server prints it at start) or --ca FILE " +
			"(or $BERTH_CA_FINGERPRINT, $BERTH_CA)"
	}
	return ""
}
