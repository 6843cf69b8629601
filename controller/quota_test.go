package controller

import (
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// loopRules returns quotaRules as the loop sees them.
func loopRules(t *testing.T, c *Controller) []berth.QuotaRule {
	t.Helper()
	var rules []berth.QuotaRule
	if err := c.do(t.Context(), func() { rules = c.quotaRules() }); err != nil {
		t.Fatal(err)
	}
	return rules
}

func storedRules(t *testing.T, c *Controller) []*berth.QuotaRule {
	t.Helper()
	rules, err := c.Quotas(t.Context())
	if err != nil {
		t.Fatalf("Quotas: %v", err)
	}
	return rules
}

func TestQuotaRules(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 9, 30, 0, 123456789, time.FixedZone("CET", 3600))
	path := filepath.Join(t.TempDir(), "berth.db")
	c, _ := startOn(t, path, now)
	ctx := t.Context()

	// Invalid rules: the validation error, nothing stored or announced.
	for _, bad := range []berth.QuotaRule{
		{Scope: "group", Name: "ml", MaxGPUs: 1, MaxJobs: berth.NoLimit},
		{Scope: "user", Name: "alice", MaxGPUs: berth.NoLimit, MaxJobs: berth.NoLimit},
		{Scope: "queue", Name: "gpu", MaxGPUs: 1, MaxJobs: berth.NoLimit, Weight: 2},
	} {
		if _, _, err := c.SetQuota(ctx, bad); berth.ErrorCode(err) != berth.ECodeInvalid {
			t.Errorf("SetQuota(%+v) = %v, want an invalid error", bad, err)
		}
	}
	if rules := storedRules(t, c); len(rules) != 0 {
		t.Fatalf("invalid rules stored: %+v", rules)
	}
	if n := c.Bus().Last(); n != 0 {
		t.Fatalf("%d events after invalid rules, want none", n)
	}

	// Create: stamped with the controller's clock in UTC, durable when
	// acknowledged, announced, and in the loop's rules.
	alice := berth.QuotaRule{Scope: "user", Name: "alice", MaxGPUs: 8, MaxJobs: 4, Weight: 2,
		UpdatedAt: time.Unix(1, 0)} // ignored: the controller stamps it
	got, created, err := c.SetQuota(ctx, alice)
	if err != nil || !created {
		t.Fatalf("SetQuota(alice) = %v, created %v; want created", err, created)
	}
	alice.UpdatedAt = now.UTC()
	if *got != alice {
		t.Errorf("SetQuota returned %+v, want %+v", *got, alice)
	}
	if ev := readEvents(t, c, 0); len(ev) != 1 || ev[0].Type != berth.EventQuotaSet || ev[0].Quota != "user:alice" ||
		ev[0].Limits != "gpus<=8 jobs<=4 weight=2" || ev[0].Actor != "" {
		t.Errorf("events after set = %+v, want one quota.set of user:alice", ev)
	}
	gpu := berth.QuotaRule{Scope: "queue", Name: "gpu", MaxGPUs: 16, MaxJobs: berth.NoLimit}
	if _, created, err := c.SetQuota(ctx, gpu); err != nil || !created {
		t.Fatalf("SetQuota(gpu) = %v, created %v", err, created)
	}
	gpu.UpdatedAt = now.UTC()
	if rules := storedRules(t, c); !reflect.DeepEqual(rules, []*berth.QuotaRule{&gpu, &alice}) {
		t.Errorf("Quotas = %+v, want queue:gpu, user:alice", rules)
	}

	// Replace.
	alice2 := berth.QuotaRule{Scope: "user", Name: "alice", MaxGPUs: berth.NoLimit, MaxJobs: 1}
	if got, created, err := c.SetQuota(ctx, alice2); err != nil || created || got.MaxJobs != 1 || got.MaxGPUs != berth.NoLimit {
		t.Fatalf("SetQuota(alice again) = %+v, %v, created %v; want replaced", got, err, created)
	}
	alice2.UpdatedAt = now.UTC()
	if rules := loopRules(t, c); !reflect.DeepEqual(rules, []berth.QuotaRule{gpu, alice2}) {
		t.Errorf("quotaRules = %+v, want queue:gpu and the new user:alice", rules)
	}

	// Deletes: malformed and unknown ids write nothing.
	last := c.Bus().Last()
	if err := c.DeleteQuota(ctx, "alice"); berth.ErrorCode(err) != berth.ECodeInvalid {
		t.Errorf("DeleteQuota(alice) = %v, want invalid", err)
	}
	err = c.DeleteQuota(ctx, "user:bob")
	if e, ok := err.(*berth.Error); !ok || e.Code != berth.ECodeNotFound || e.Field != "id" {
		t.Errorf("DeleteQuota(user:bob) = %#v, want not_found naming id", err)
	}
	if n := c.Bus().Last(); n != last {
		t.Errorf("events after failed deletes: %d, want %d", n, last)
	}
	if err := c.DeleteQuota(ctx, "queue:gpu"); err != nil {
		t.Fatalf("DeleteQuota(queue:gpu): %v", err)
	}
	if ev := readEvents(t, c, last); len(ev) != 1 || ev[0].Type != berth.EventQuotaDeleted || ev[0].Quota != "queue:gpu" {
		t.Errorf("events after delete = %+v, want one quota.deleted of queue:gpu", ev)
	}
	if err := c.DeleteQuota(ctx, "queue:gpu"); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Errorf("second DeleteQuota(queue:gpu) = %v, want not_found", err)
	}
	if rules := storedRules(t, c); !reflect.DeepEqual(rules, []*berth.QuotaRule{&alice2}) {
		t.Errorf("Quotas after delete = %+v, want user:alice", rules)
	}
	if rules := loopRules(t, c); !reflect.DeepEqual(rules, []berth.QuotaRule{alice2}) {
		t.Errorf("quotaRules after delete = %+v, want user:alice", rules)
	}
}

func TestQuotaRulesSurviveRestart(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 9, 30, 0, 1, time.UTC)
	path := filepath.Join(t.TempDir(), "berth.db")
	ctx := t.Context()
	{
		c, stop := startOn(t, path, now)
		for _, q := range []berth.QuotaRule{
			{Scope: "user", Name: "bob", MaxGPUs: 2, MaxJobs: berth.NoLimit},
			{Scope: "template", Name: "jupyter", MaxGPUs: berth.NoLimit, MaxJobs: 1},
			{Scope: "queue", Name: "cpu", MaxGPUs: 0, MaxJobs: 10},
		} {
			if _, _, err := c.SetQuota(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.DeleteQuota(ctx, "queue:cpu"); err != nil {
			t.Fatal(err)
		}
		stop()
	}
	c, _ := startOn(t, path, now.Add(time.Hour))
	want := []berth.QuotaRule{
		{Scope: "template", Name: "jupyter", MaxGPUs: berth.NoLimit, MaxJobs: 1, UpdatedAt: now},
		{Scope: "user", Name: "bob", MaxGPUs: 2, MaxJobs: berth.NoLimit, UpdatedAt: now},
	}
	if rules := loopRules(t, c); !reflect.DeepEqual(rules, want) {
		t.Errorf("quotaRules after restart = %+v, want %+v", rules, want)
	}
	// The rebuilt map is live: a replace after restart is not a create.
	if _, created, err := c.SetQuota(ctx, berth.QuotaRule{Scope: "user", Name: "bob", MaxGPUs: 3, MaxJobs: berth.NoLimit}); err != nil || created {
		t.Errorf("SetQuota(bob) after restart: %v, created %v; want replaced", err, created)
	}
}
