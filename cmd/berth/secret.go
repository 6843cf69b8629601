package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/berth-dev/berth"
)

// secretCommands are the subcommands of berth secret.
var secretCommands = subcommands{
	name: "secret",
	help: `Usage: berth secret set|list|rm [flags] NAME

Secrets are values your jobs need but nobody should see: API keys, passwords.
They are sealed (AES-256-GCM) in the store with a key kept outside it, and a
job references one as {{SECRET:NAME}} in its command, env or workdir. The
agent that runs the job substitutes the value just before it starts it and
masks it in the output it ships; API responses, events and the audit log
never hold it.

  echo -n VALUE | berth secret set NAME     the value is read from stdin
  berth secret list [-o json]
  berth secret rm NAME

Each user has their own secrets; admins manage anyone's with --owner USER.
`,
	run: map[string]func(ctx context.Context, m *Main, args []string) error{
		"set":  runSecretSet,
		"list": runSecretList,
		"rm":   runSecretRm,
	},
}

func runSecret(ctx context.Context, m *Main, args []string) error {
	return secretCommands.dispatch(ctx, m, args)
}

func runSecretSet(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("secret set", "[flags] NAME   (the value is read from stdin)")
	cf := m.addClientFlags(fs, true)
	owner := fs.String("owner", "", "whose secret (admins only; default your own)")
	name, err := parseOneArg(fs, cf, args, "name", "give exactly one secret NAME; the value is read from stdin")
	if err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(m.Stdin, 64<<10+2))
	if err != nil {
		return fmt.Errorf("read the value from stdin: %w", err)
	}
	value := strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r")
	if value == "" {
		return berth.Invalidf("value", "stdin was empty; pipe the value in: echo -n VALUE | berth secret set %s", name)
	}
	s, err := m.client(cf).SetSecret(ctx, *owner, name, value)
	if err != nil {
		return err
	}
	if cf.output != "table" {
		return printData(m.Stdout, cf.output, s)
	}
	fmt.Fprintf(m.Stdout, "secret %s of %s set; reference it as {{SECRET:%s}}\n", s.Name, s.Owner, s.Name)
	return nil
}

func runSecretList(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("secret list", "[flags]")
	cf := m.addClientFlags(fs, true)
	owner := fs.String("owner", "", "whose secrets: a user, or * for everyone's (admins only; default your own)")
	if err := parseNoArgs(fs, cf, args, "secret list"); err != nil {
		return err
	}
	list, err := m.client(cf).Secrets(ctx, *owner)
	if err != nil {
		return err
	}
	return printList(m.Stdout, cf.output, list, func() error {
		now := time.Now()
		t := newTable(m.Stdout, "OWNER", "NAME", "UPDATED", "BY")
		for _, s := range list {
			t.row(s.Owner, s.Name, ago(s.UpdatedAt, now), orDash(s.UpdatedBy))
		}
		return t.flush()
	})
}

func runSecretRm(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("secret rm", "[flags] NAME")
	cf := m.addClientFlags(fs, false)
	owner := fs.String("owner", "", "whose secret (admins only; default your own)")
	name, err := parseOneArg(fs, cf, args, "name", "give exactly one secret NAME")
	if err != nil {
		return err
	}
	if err := m.client(cf).DeleteSecret(ctx, *owner, name); err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "secret %s removed\n", name)
	return nil
}
