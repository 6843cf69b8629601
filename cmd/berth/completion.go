package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/berth-dev/berth"
)

// completionNode is a command or subcommand as a shell completes it.
type completionNode struct {
	summary string   // a command's, for the shells that show it
	flags   []string // as typed: -o, --server
	words   []string // the subcommands, or the arguments it takes from a fixed set
}

// completionShells are the shells berth completion writes a script for.
var completionShells = []string{"bash", "zsh", "fish"}

// completion prints the completion script of the shell args names.
func (m *Main) completion(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return berth.Invalidf("shell", "give one shell: bash, zsh or fish (source <(berth completion bash))")
	}
	tree := m.completionTree(ctx)
	switch args[0] {
	case "bash":
		writeBashCompletion(m.Stdout, tree)
	case "zsh":
		fmt.Fprint(m.Stdout, "#compdef berth\n# zsh completion for berth: berth completion zsh > \"${fpath[1]}/_berth\"\nautoload -U +X bashcompinit && bashcompinit\n")
		writeBashCompletion(m.Stdout, tree)
	case "fish":
		writeFishCompletion(m.Stdout, tree)
	default:
		return berth.Invalidf("shell", "%q: must be bash, zsh or fish%s", args[0], suggest(args[0], completionShells))
	}
	return nil
}

// defaultFlag matches a flag's line in a FlagSet's PrintDefaults.
var defaultFlag = regexp.MustCompile(`(?m)^  -(\S+)`)

// completionTree returns every command with its flags and subcommands,
// learnt by asking each for its usage (-h): the flags' one definition.
func (m *Main) completionTree(ctx context.Context) map[string]*completionNode {
	usage := func(run func(context.Context, *Main, []string) error, args []string, subs *[]string) []string {
		var out bytes.Buffer
		probe := &Main{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &out, Getenv: m.Getenv, subcommandsSeen: subs}
		_ = run(ctx, probe, args) // -h: its usage, and flag.ErrHelp
		var flags []string
		for _, f := range defaultFlag.FindAllStringSubmatch(out.String(), -1) {
			flags = append(flags, flagName(f[1]))
		}
		return flags
	}
	tree := map[string]*completionNode{}
	for _, name := range commandNames() {
		n := &completionNode{summary: summary(name)}
		tree[name] = n
		switch name {
		case "help":
			n.words = commandNames()
		case "completion":
			n.words = completionShells
		}
		cmd, ok := commands[name]
		if !ok {
			continue
		}
		var subs []string
		n.flags = usage(cmd.run, []string{"-h"}, &subs)
		for _, sub := range subs {
			n.words = append(n.words, sub)
			tree[name+" "+sub] = &completionNode{flags: usage(cmd.run, []string{sub, "-h"}, nil)}
		}
	}
	return tree
}

// clientFlagNames returns the client flags, as typed; berth takes them
// before a command too, and each takes a value.
func clientFlagNames() []string {
	m := &Main{Getenv: func(string) string { return "" }}
	fs := m.flagSet("", "")
	m.addClientFlags(fs, true)
	return flagNames(fs)
}

// writeBashCompletion writes a bash completion function for tree.
func writeBashCompletion(w io.Writer, tree map[string]*completionNode) {
	var withSubs []string
	for _, name := range commandNames() {
		if _, ok := commands[name]; ok && len(tree[name].words) > 0 {
			withSubs = append(withSubs, name)
		}
	}
	var skip []string
	for _, f := range clientFlagNames() {
		skip = append(skip, f, "-"+strings.TrimLeft(f, "-")) // Go's flags take one dash or two
	}
	fmt.Fprintf(w, `# bash completion for berth: source <(berth completion bash)
_berth() {
    local cur="${COMP_WORDS[COMP_CWORD]}" path="" word i
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${COMP_WORDS[i]}"
        case "$word" in
        %s) ((i++)); continue ;;
        -*) continue ;;
        esac
        case "$path" in
        "") path="$word" ;;
        %s) path="$path $word" ;;
        *) break ;;
        esac
    done
    local words=""
    case "$path" in
    "") words=%q ;;
`, strings.Join(slices.Compact(skip), "|"), strings.Join(withSubs, "|"), strings.Join(append(commandNames(), clientFlagNames()...), " "))
	for _, key := range slices.Sorted(maps.Keys(tree)) {
		n := tree[key]
		fmt.Fprintf(w, "    %q) words=%q ;;\n", key, strings.Join(append(append([]string{}, n.words...), n.flags...), " "))
	}
	fmt.Fprint(w, `    esac
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -F _berth berth
`)
}

// writeFishCompletion writes fish completions for tree.
func writeFishCompletion(w io.Writer, tree map[string]*completionNode) {
	fmt.Fprint(w, "# fish completion for berth: berth completion fish > ~/.config/fish/completions/berth.fish\ncomplete -c berth -f\n")
	names := commandNames()
	for _, name := range names {
		fmt.Fprintf(w, "complete -c berth -n __fish_use_subcommand -a %s -d %s\n", name, fishQuote(tree[name].summary))
	}
	for _, f := range clientFlagNames() {
		fmt.Fprintf(w, "complete -c berth %s\n", fishFlag(f))
	}
	for _, key := range slices.Sorted(maps.Keys(tree)) {
		n := tree[key]
		cmd, sub, isSub := strings.Cut(key, " ")
		cond := "__fish_seen_subcommand_from " + cmd
		if isSub {
			cond += "; and __fish_seen_subcommand_from " + sub
		} else if len(n.words) > 0 {
			fmt.Fprintf(w, "complete -c berth -n %s -a %s\n", fishQuote(cond+"; and not __fish_seen_subcommand_from "+strings.Join(n.words, " ")),
				fishQuote(strings.Join(n.words, " ")))
		}
		for _, f := range n.flags {
			fmt.Fprintf(w, "complete -c berth -n %s %s\n", fishQuote(cond), fishFlag(f))
		}
	}
}

// fishFlag is the option of fish's complete that offers flag f.
func fishFlag(f string) string {
	if name, ok := strings.CutPrefix(f, "--"); ok {
		return "-l " + name
	}
	return "-s " + strings.TrimPrefix(f, "-")
}

// fishQuote quotes s for fish, in single quotes.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
