package main

import (
	"context"
	"fmt"
	"time"

	"github.com/berth-dev/berth"
)

// quotaCommands are the subcommands of berth quota.
var quotaCommands = subcommands{
	name: "quota",
	help: `Usage: berth quota set|list|rm [flags] [args]

Quota rules cap what the running jobs of one user, queue or template may
hold at once; a job over a cap waits with reason "quota". A user rule's
weight is that user's fair-share weight (default 1).

  berth quota set SCOPE:NAME [gpus<=N] [jobs<=N] [weight=W]   e.g. user:alice 'gpus<=8' 'jobs<=4'
  berth quota list [-o json]
  berth quota rm SCOPE:NAME

SCOPE is user, queue or template. Run berth quota SUBCOMMAND -h for its flags.
`,
	run: map[string]func(ctx context.Context, m *Main, args []string) error{
		"set":  runQuotaSet,
		"list": runQuotaList,
		"rm":   runQuotaRm,
	},
}

func runQuota(ctx context.Context, m *Main, args []string) error {
	return quotaCommands.dispatch(ctx, m, args)
}

func runQuotaSet(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("quota set", "[flags] SCOPE:NAME [gpus<=N] [jobs<=N] [weight=W]")
	cf := m.addClientFlags(fs, true)
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	if len(rest) == 0 {
		return berth.Invalidf("id", "give a rule SCOPE:NAME, e.g. user:alice, and its limits, e.g. 'gpus<=8' 'jobs<=4'")
	}
	rule, err := berth.ParseQuotaRule(rest[0], rest[1:])
	if err != nil {
		return err
	}
	q, created, err := m.client(cf).SetQuota(ctx, rule)
	if err != nil {
		return err
	}
	if cf.output != "table" {
		return printData(m.Stdout, cf.output, q)
	}
	verb := "replaced"
	if created {
		verb = "created"
	}
	fmt.Fprintf(m.Stdout, "%s %s: %s\n", q.ID(), verb, q.Limits())
	return nil
}

func runQuotaList(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("quota list", "[flags]")
	cf := m.addClientFlags(fs, true)
	if err := parseNoArgs(fs, cf, args, "quota list"); err != nil {
		return err
	}
	list, err := m.client(cf).Quotas(ctx)
	if err != nil {
		return err
	}
	return printList(m.Stdout, cf.output, list, func() error {
		now := time.Now()
		t := newTable(m.Stdout, "RULE", "LIMITS", "UPDATED")
		for _, q := range list {
			t.row(q.ID(), orDash(q.Limits()), ago(q.UpdatedAt, now))
		}
		return t.flush()
	})
}

func runQuotaRm(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("quota rm", "[flags] SCOPE:NAME")
	cf := m.addClientFlags(fs, false)
	id, err := parseOneArg(fs, cf, args, "id", "give exactly one rule SCOPE:NAME, e.g. user:alice")
	if err != nil {
		return err
	}
	if err := m.client(cf).DeleteQuota(ctx, id); err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "%s removed\n", id)
	return nil
}
