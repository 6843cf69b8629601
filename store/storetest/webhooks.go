package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// webhookTests check store.WebhookStore.
var webhookTests = []test{
	{"Webhooks", testWebhooks},
	{"Deliveries", testDeliveries},
}

func testWebhooks(t *testing.T, s store.Store) {
	ctx := context.Background()
	if ws, err := s.Webhooks(ctx); err != nil || len(ws) != 0 {
		t.Fatalf("Webhooks of a new store = %v, %v; want none", ws, err)
	}
	a := &berth.Webhook{ID: "wh-a", URL: "https://hooks.example.com/berth?x=1", Secret: "s3cr3t — ünïcode",
		Events: []string{"job.", "service.ready"}, CreatedBy: "alice", CreatedAt: base}
	b := &berth.Webhook{ID: "wh-b", URL: "http://127.0.0.1:9/", CreatedAt: base.Add(time.Second), Disabled: true}
	for _, w := range []*berth.Webhook{b, a} {
		if err := s.CreateWebhook(ctx, w); err != nil {
			t.Fatalf("CreateWebhook(%s): %v", w.ID, err)
		}
	}
	dup := *a
	dup.URL = "https://evil.example.com/"
	if err := s.CreateWebhook(ctx, &dup); berth.ErrorCode(err) != berth.ECodeConflict {
		t.Fatalf("CreateWebhook of an existing id: got %v, want a conflict", err)
	}
	wantA, wantB := *a, *b
	wantA.SecretSet, wantB.Events = true, []string{}
	got, err := s.Webhooks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "Webhooks, oldest first, secrets kept, a duplicate id changing nothing", got, []*berth.Webhook{&wantA, &wantB})

	if err := s.DeleteWebhook(ctx, "nope"); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Fatalf("DeleteWebhook of an unknown id: got %v, want not found", err)
	}
	if err := s.DeleteWebhook(ctx, "wh-a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteWebhook(ctx, "wh-a"); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Fatalf("DeleteWebhook twice: got %v, want not found", err)
	}
	got, _ = s.Webhooks(ctx)
	checkEqual(t, "Webhooks after a delete", got, []*berth.Webhook{&wantB})
}

// delivery returns a pending delivery of webhook wh due at next.
func delivery(ids *idSource, wh string, seq uint64, next time.Time) *berth.Delivery {
	id := ids.next()
	return &berth.Delivery{ID: id, WebhookID: wh, EventSeq: seq, EventType: "job.succeeded",
		Body:  json.RawMessage(fmt.Sprintf(`{"event":"job.succeeded","delivery_id":%q,"data":{"seq":%d,"reason":"ünï \u0000"}}`, id, seq)),
		State: berth.DeliveryPending, NextAttemptAt: next, CreatedAt: base}
}

func testDeliveries(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, w := range []*berth.Webhook{
		{ID: "a", URL: "http://a.example/", CreatedAt: base},
		{ID: "b", URL: "http://b.example/", CreatedAt: base},
		{ID: "off", URL: "http://off.example/", CreatedAt: base, Disabled: true},
	} {
		if err := s.CreateWebhook(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddDeliveries(ctx, nil); err != nil {
		t.Fatalf("AddDeliveries of none: %v", err)
	}
	var ids idSource
	d1 := delivery(&ids, "a", 1, base)
	d2 := delivery(&ids, "a", 2, base.Add(2*time.Second))
	d3 := delivery(&ids, "b", 1<<62, base.Add(-time.Second))
	d4 := delivery(&ids, "off", 3, base.Add(-5*time.Second))
	d5 := delivery(&ids, "a", 4, time.Time{})
	d5.State, d5.Attempts, d5.LastStatus, d5.DeliveredAt = berth.DeliveryDelivered, 2, 204, base.Add(time.Minute)
	d6 := delivery(&ids, "gone", 5, base.Add(-time.Hour)) // of no webhook
	if err := s.AddDeliveries(ctx, []*berth.Delivery{d1, d2, d3, d4, d5, d6}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []*berth.Delivery{d1, d3, d5} {
		got, err := s.Delivery(ctx, d.ID)
		if err != nil {
			t.Fatal(err)
		}
		checkEqual(t, "stored delivery "+d.ID+", body and nanoseconds kept", got, d)
	}
	if _, err := s.Delivery(ctx, "nope"); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Fatalf("Delivery of an unknown id: got %v, want not found", err)
	}

	due := func(now time.Time, limit int) []*berth.Delivery {
		t.Helper()
		ds, err := s.DueDeliveries(ctx, now, limit)
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	// Pending, due, of an existing enabled webhook, soonest first.
	checkEqual(t, "DueDeliveries at base", due(base, 10), []*berth.Delivery{d3, d1})
	checkEqual(t, "DueDeliveries at base+2s, limit 1", due(base.Add(2*time.Second), 1), []*berth.Delivery{d3})
	checkEqual(t, "DueDeliveries at base+2s", due(base.Add(2*time.Second), 10), []*berth.Delivery{d3, d1, d2})
	if ds := due(base, 0); len(ds) != 0 {
		t.Errorf("DueDeliveries with limit 0 = %d deliveries, want none", len(ds))
	}

	// All or none: a batch holding a stored id adds nothing.
	fresh := delivery(&ids, "a", 9, base)
	if err := s.AddDeliveries(ctx, []*berth.Delivery{fresh, d2}); err == nil {
		t.Fatal("AddDeliveries with an id already stored succeeded")
	}
	if _, err := s.Delivery(ctx, fresh.ID); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Fatalf("a delivery of a failed AddDeliveries was stored: %v", err)
	}
	tooMany := make([]*berth.Delivery, store.MaxDeliveriesPerAdd+1)
	for i := range tooMany {
		tooMany[i] = delivery(&ids, "b", uint64(i), base.Add(time.Hour))
	}
	if err := s.AddDeliveries(ctx, tooMany); berth.ErrorCode(err) != berth.ECodeInvalid {
		t.Fatalf("AddDeliveries of %d: got %v, want invalid", len(tooMany), err)
	}
	if err := s.AddDeliveries(ctx, tooMany[:store.MaxDeliveriesPerAdd]); err != nil {
		t.Fatalf("AddDeliveries of MaxDeliveriesPerAdd: %v", err)
	}

	// Updates.
	up := *d1
	up.Attempts, up.State, up.LastStatus, up.LastError, up.NextAttemptAt = 1, berth.DeliveryPending, 503,
		"answered 503 Service Unavailable — ünï", base.Add(time.Second)
	if err := s.UpdateDelivery(ctx, &up); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Delivery(ctx, d1.ID)
	checkEqual(t, "delivery after a failed attempt", got, &up)
	checkEqual(t, "DueDeliveries at base after d1 was put off", due(base, 10), []*berth.Delivery{d3})
	up.Attempts, up.State, up.LastStatus, up.LastError, up.NextAttemptAt, up.DeliveredAt = 2, berth.DeliveryDelivered, 200,
		"", time.Time{}, base.Add(3*time.Second)
	up.Body = json.RawMessage(`{"ignored":true}`) // not an updated field
	if err := s.UpdateDelivery(ctx, &up); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Delivery(ctx, d1.ID)
	up.Body = d1.Body
	checkEqual(t, "delivered delivery", got, &up)
	missing := *d1
	missing.ID = "nope"
	if err := s.UpdateDelivery(ctx, &missing); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Fatalf("UpdateDelivery of an unknown id: got %v, want not found", err)
	}

	// The log, newest first.
	list := func(wh string, limit int) []*berth.Delivery {
		t.Helper()
		ds, err := s.Deliveries(ctx, wh, limit)
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	checkEqual(t, "Deliveries of a, newest first", list("a", 0), []*berth.Delivery{d5, d2, &up})
	checkEqual(t, "Deliveries of a, limit 2", list("a", 2), []*berth.Delivery{d5, d2})
	if n := len(list("b", 0)); n != 1+store.MaxDeliveriesPerAdd {
		t.Errorf("Deliveries of b = %d, want %d", n, 1+store.MaxDeliveriesPerAdd)
	}
	if ds := list("nope", 0); len(ds) != 0 {
		t.Errorf("Deliveries of an unknown webhook = %d, want none", len(ds))
	}

	// Deleting a webhook deletes its deliveries.
	if err := s.DeleteWebhook(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if ds := list("b", 0); len(ds) != 0 {
		t.Errorf("Deliveries of a deleted webhook = %d, want none", len(ds))
	}
	if _, err := s.Delivery(ctx, d3.ID); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Errorf("Delivery of a deleted webhook's delivery: got %v, want not found", err)
	}
	checkEqual(t, "DueDeliveries after deleting b", due(base.Add(2*time.Second), 10), []*berth.Delivery{d2})
}
