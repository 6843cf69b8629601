package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth"
)

// webhookCommands are the subcommands of berth webhook.
var webhookCommands = subcommands{
	name: "webhook",
	help: `Usage: berth webhook add|list|rm|deliveries|redeliver [flags] [args]

Webhooks POST Berth's events (job.*, worker.*, service.*, quota.*) as JSON
to a URL, signed with X-Berth-Signature when a secret is set, retried with
backoff until the receiver answers 2xx; each delivery is logged.
docs/webhooks.md has the payload, headers and retry schedule.

  berth webhook add URL [--secret S] [--events job.,service.ready]   admins; default: every event
  berth webhook list [-o json]
  berth webhook rm ID                                                 admins
  berth webhook deliveries ID [--limit N] [-o json]                   newest first
  berth webhook redeliver DELIVERY_ID                                 admins: try it again now

An events entry ending in "." is a prefix (job. is every job event).
Run berth webhook SUBCOMMAND -h for its flags.
`,
	run: map[string]func(ctx context.Context, m *Main, args []string) error{
		"add":        runWebhookAdd,
		"list":       runWebhookList,
		"rm":         runWebhookRm,
		"deliveries": runWebhookDeliveries,
		"redeliver":  runWebhookRedeliver,
	},
}

func runWebhook(ctx context.Context, m *Main, args []string) error {
	return webhookCommands.dispatch(ctx, m, args)
}

func runWebhookAdd(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("webhook add", "[flags] URL")
	cf := m.addClientFlags(fs, true)
	secret := fs.String("secret", m.Getenv("BERTH_WEBHOOK_SECRET"), "shared secret that signs each body (X-Berth-Signature) (default $BERTH_WEBHOOK_SECRET)")
	events := fs.String("events", "", "comma-separated event types and prefixes ending in \".\", e.g. job.,service.ready (default: every event)")
	url, err := parseOneArg(fs, cf, args, "url", "give exactly one http:// or https:// URL to POST events to")
	if err != nil {
		return err
	}
	req := berth.WebhookRequest{URL: url, Secret: *secret}
	if *events != "" {
		for _, e := range strings.Split(*events, ",") {
			req.Events = append(req.Events, strings.TrimSpace(e))
		}
	}
	if err := req.Validate(); err != nil {
		if e, ok := err.(*berth.Error); ok && e.Field != "url" {
			e.Field = "--" + e.Field
		}
		return err
	}
	w, err := m.client(cf).CreateWebhook(ctx, req)
	if err != nil {
		return err
	}
	if cf.output != "table" {
		return printData(m.Stdout, cf.output, w)
	}
	signed := "unsigned"
	if w.SecretSet {
		signed = "signed"
	}
	fmt.Fprintf(m.Stdout, "%s created: %s (%s, %s)\n", w.ID, w.URL, webhookEvents(w), signed)
	return nil
}

// webhookEvents describes what w subscribes to.
func webhookEvents(w *berth.Webhook) string {
	if len(w.Events) == 0 {
		return "every event"
	}
	return strings.Join(w.Events, ",")
}

func runWebhookList(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("webhook list", "[flags]")
	cf := m.addClientFlags(fs, true)
	if err := parseNoArgs(fs, cf, args, "webhook list"); err != nil {
		return err
	}
	list, err := m.client(cf).Webhooks(ctx)
	if err != nil {
		return err
	}
	return printList(m.Stdout, cf.output, list, func() error {
		now := time.Now()
		t := newTable(m.Stdout, "ID", "URL", "EVENTS", "SIGNED", "CREATED")
		for _, w := range list {
			t.row(w.ID, truncate(w.URL, 60), truncate(webhookEvents(w), 40), yesNo(w.SecretSet), ago(w.CreatedAt, now))
		}
		return t.flush()
	})
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func runWebhookRm(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("webhook rm", "[flags] ID")
	cf := m.addClientFlags(fs, false)
	id, err := parseOneArg(fs, cf, args, "id", "give exactly one webhook ID (berth webhook list shows them)")
	if err != nil {
		return err
	}
	if err := m.client(cf).DeleteWebhook(ctx, id); err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "%s removed\n", id)
	return nil
}

func runWebhookDeliveries(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("webhook deliveries", "[flags] ID")
	cf := m.addClientFlags(fs, true)
	limit := fs.Int("limit", 100, "most deliveries to list, newest first (0 for all)")
	id, err := parseOneArg(fs, cf, args, "id", "give exactly one webhook ID (berth webhook list shows them)")
	if err != nil {
		return err
	}
	if *limit < 0 {
		return berth.Invalidf("--limit", "must be 0 (all) or more")
	}
	list, err := m.client(cf).Deliveries(ctx, id, *limit)
	if err != nil {
		return err
	}
	return printList(m.Stdout, cf.output, list, func() error {
		now := time.Now()
		t := newTable(m.Stdout, "ID", "EVENT", "STATE", "ATTEMPTS", "STATUS", "WHEN", "ERROR")
		for _, d := range list {
			status := "-"
			if d.LastStatus != 0 {
				status = strconv.Itoa(d.LastStatus)
			}
			t.row(d.ID, d.EventType, string(d.State), strconv.Itoa(d.Attempts), status, deliveryWhen(d, now), orDash(truncate(d.LastError, 50)))
		}
		return t.flush()
	})
}

// deliveryWhen says when d was delivered, or when it is tried next.
func deliveryWhen(d *berth.Delivery, now time.Time) string {
	switch {
	case d.State == berth.DeliveryDelivered:
		return ago(d.DeliveredAt, now) + " ago"
	case d.State == berth.DeliveryPending && d.NextAttemptAt.After(now):
		return "retry in " + d.NextAttemptAt.Sub(now).Round(time.Second).String()
	case d.State == berth.DeliveryPending:
		return "now"
	}
	return "created " + ago(d.CreatedAt, now) + " ago"
}

func runWebhookRedeliver(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("webhook redeliver", "[flags] DELIVERY_ID")
	cf := m.addClientFlags(fs, true)
	id, err := parseOneArg(fs, cf, args, "id", "give exactly one delivery ID (berth webhook deliveries WEBHOOK_ID shows them)")
	if err != nil {
		return err
	}
	d, err := m.client(cf).Redeliver(ctx, id)
	if err != nil {
		return err
	}
	if cf.output != "table" {
		return printData(m.Stdout, cf.output, d)
	}
	fmt.Fprintf(m.Stdout, "%s queued for redelivery (%s)\n", d.ID, d.EventType)
	return nil
}
