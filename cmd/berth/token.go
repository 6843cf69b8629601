package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/berth-dev/berth"
)

// tokenCommands are the subcommands of berth token.
var tokenCommands = subcommands{
	name: "token",
	help: `Usage: berth token create|list|revoke [flags] [args]

Tokens are signed bearer tokens (JWT, HS256) for people, agents and peers;
each has a role and an id it can be revoked by. Admins only.

  berth token create --role ROLE --name NAME [--ttl 30d] [--models M1,M2] [--rpm N]
                                                  prints the token, once
  berth token list [-o json]
  berth token revoke ID...

Roles: viewer (reads everything), user (submits and manages its own jobs and
secrets), operator (every job, workers and quotas), admin (everything, tokens
included), agent (a join token: berth agent --join-token trades it for a
credential bound to its host), peer (a federation peer). Clients send a token
with BERTH_TOKEN=...

A user, operator or admin token is also an API key of the inference gateway
(OpenAI-compatible, at SERVER/v1; docs/gateway.md): --models limits the
models it may call there, --rpm its requests per minute (a token bucket
holding one minute's requests).
`,
	run: map[string]func(ctx context.Context, m *Main, args []string) error{
		"create": runTokenCreate,
		"list":   runTokenList,
		"revoke": runTokenRevoke,
	},
}

func runToken(ctx context.Context, m *Main, args []string) error {
	return tokenCommands.dispatch(ctx, m, args)
}

func runTokenCreate(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("token create", "--role ROLE --name NAME [--ttl D]")
	cf := m.addClientFlags(fs, true)
	role := fs.String("role", "", "viewer, user, operator, admin, agent (a join token) or peer")
	name := fs.String("name", "", "who the token is for: a user name (its jobs run as that user), a pool of agents, a peer")
	ttl := fs.String("ttl", "", "how long the token is valid, e.g. 12h or 30d (default: until revoked)")
	models := fs.String("models", "", "the models it may call through the inference gateway, comma-separated (default: every model)")
	rpm := fs.Int("rpm", 0, "its requests per minute through the inference gateway (default 0: no limit)")
	if err := parseNoArgs(fs, cf, args, "token create"); err != nil {
		return err
	}
	req := berth.TokenRequest{Name: *name, Role: *role, RPM: *rpm}
	for m := range strings.SplitSeq(*models, ",") {
		if m = strings.TrimSpace(m); m != "" {
			req.Models = append(req.Models, m)
		}
	}
	if err := berth.ValidateGatewayLimits(req.Models, req.RPM); err != nil {
		var be *berth.Error
		if errors.As(err, &be) {
			be.Field = "--" + be.Field // the flag's name
		}
		return err
	}
	if *ttl != "" {
		d, err := berth.ParseDuration(*ttl)
		if err != nil || d <= 0 {
			return berth.Invalidf("--ttl", "%q: want a positive duration such as 12h or 30d", *ttl)
		}
		req.TTL = berth.Duration(d)
	}
	tok, err := m.client(cf).CreateToken(ctx, req)
	if err != nil {
		return err
	}
	if cf.output != "table" {
		return printData(m.Stdout, cf.output, tok)
	}
	fmt.Fprintln(m.Stdout, tok.Secret)
	fmt.Fprintf(m.Stderr, "token %s for %s (role %s, expires %s); shown this once\n", tok.ID, tok.Name, tok.Role, expiry(tok.ExpiresAt))
	return nil
}

func expiry(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Format(time.RFC3339)
}

func runTokenList(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("token list", "[flags]")
	cf := m.addClientFlags(fs, true)
	if err := parseNoArgs(fs, cf, args, "token list"); err != nil {
		return err
	}
	list, err := m.client(cf).Tokens(ctx)
	if err != nil {
		return err
	}
	return printList(m.Stdout, cf.output, list, func() error {
		now := time.Now()
		t := newTable(m.Stdout, "ID", "NAME", "ROLE", "WORKER", "CREATED", "EXPIRES", "GATEWAY", "STATE")
		for _, tok := range list {
			state := "live"
			switch {
			case !tok.RevokedAt.IsZero():
				state = "revoked " + ago(tok.RevokedAt, now)
			case !tok.Live(now):
				state = "expired"
			}
			t.row(tok.ID, tok.Name, tok.Role, orDash(tok.Worker), ago(tok.CreatedAt, now), expiry(tok.ExpiresAt), gatewayLimits(tok), state)
		}
		return t.flush()
	})
}

// gatewayLimits says what a token may do at the inference gateway: its
// models and requests per minute, "-" when it is not limited.
func gatewayLimits(t *berth.Token) string {
	var parts []string
	if len(t.Models) > 0 {
		parts = append(parts, strings.Join(t.Models, ","))
	}
	if t.RPM > 0 {
		parts = append(parts, fmt.Sprintf("%d/min", t.RPM))
	}
	return orDash(strings.Join(parts, " "))
}

func runTokenRevoke(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("token revoke", "[flags] ID...")
	cf := m.addClientFlags(fs, false)
	ids, err := parseIDs(fs, cf, args, "give the ids of the tokens to revoke (berth token list)")
	if err != nil {
		return err
	}
	c := m.client(cf)
	for _, id := range ids {
		tok, err := c.RevokeToken(ctx, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(m.Stdout, "%s revoked (%s, role %s)\n", tok.ID, tok.Name, tok.Role)
	}
	return nil
}
