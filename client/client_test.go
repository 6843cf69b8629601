package client_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/api/apitest"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/client"
	"github.com/berth-dev/berth/controller"
	"github.com/berth-dev/berth/sqlite"
)

// newClient returns a client of a real server on real SQLite.
func newClient(t *testing.T) *client.Client {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	ctl := controller.New(controller.Config{Store: st})
	if err := ctl.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	sec := apitest.Security(t, st, "")
	hs := httptest.NewServer(api.New(ctl, st, sec, nil))
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ctl.Stop(ctx); err != nil {
			t.Errorf("stop controller: %v", err)
		}
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return client.New(hs.URL+"/", apitest.Token(t, sec, "root", auth.RoleAdmin, ""), nil)
}

// wantError requires err to be the server's *berth.Error with code and field.
func wantError(t *testing.T, what string, err error, code, field string) {
	t.Helper()
	var e *berth.Error
	if !errors.As(err, &e) || e.Code != code || e.Field != field {
		t.Errorf("%s: error %v, want the server's %s error naming %q", what, err, code, field)
	}
}

func TestQuotas(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	ctx := t.Context()
	if qs, err := c.Quotas(ctx); err != nil || len(qs) != 0 {
		t.Fatalf("Quotas of a new server = %v, %v; want none", qs, err)
	}

	rule, err := berth.ParseQuotaRule("user:alice", []string{"gpus<=8", "jobs<=4", "weight=2"})
	if err != nil {
		t.Fatal(err)
	}
	got, created, err := c.SetQuota(ctx, rule)
	if err != nil || !created {
		t.Fatalf("SetQuota: %v, created %v; want created", err, created)
	}
	if got.ID() != "user:alice" || got.Limits() != "gpus<=8 jobs<=4 weight=2" || got.UpdatedAt.IsZero() {
		t.Errorf("SetQuota returned %+v", got)
	}
	rule.MaxGPUs = berth.NoLimit
	got, created, err = c.SetQuota(ctx, rule)
	if err != nil || created || got.Limits() != "jobs<=4 weight=2" {
		t.Fatalf("SetQuota again = %+v, %v, created %v; want replaced", got, err, created)
	}
	queue := berth.QuotaRule{Scope: "queue", Name: "gpu", MaxGPUs: 16, MaxJobs: berth.NoLimit}
	if _, created, err := c.SetQuota(ctx, queue); err != nil || !created {
		t.Fatalf("SetQuota(queue:gpu): %v, created %v", err, created)
	}
	qs, err := c.Quotas(ctx)
	if err != nil || len(qs) != 2 || qs[0].ID() != "queue:gpu" || qs[1].ID() != "user:alice" || *qs[1] != *got {
		t.Fatalf("Quotas = %+v, %v; want queue:gpu and user:alice", qs, err)
	}

	// Errors are the server's, naming the field.
	_, _, err = c.SetQuota(ctx, berth.QuotaRule{Scope: "user", Name: "bob", MaxGPUs: -5, MaxJobs: berth.NoLimit})
	wantError(t, "SetQuota(gpus -5)", err, berth.ECodeInvalid, "max_gpus")
	_, _, err = c.SetQuota(ctx, berth.QuotaRule{Scope: "group", Name: "ml", MaxGPUs: 1, MaxJobs: berth.NoLimit})
	wantError(t, "SetQuota(group:ml)", err, berth.ECodeInvalid, "scope")
	wantError(t, "DeleteQuota(user:bob)", c.DeleteQuota(ctx, "user:bob"), berth.ECodeNotFound, "id")
	wantError(t, "DeleteQuota(bob)", c.DeleteQuota(ctx, "bob"), berth.ECodeInvalid, "id")

	if err := c.DeleteQuota(ctx, "user:alice"); err != nil {
		t.Fatalf("DeleteQuota: %v", err)
	}
	if qs, err := c.Quotas(ctx); err != nil || len(qs) != 1 || qs[0].ID() != "queue:gpu" {
		t.Errorf("Quotas after delete = %+v, %v; want queue:gpu", qs, err)
	}
}
