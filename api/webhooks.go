package api

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/berth-dev/berth"
)

// Webhook subscriptions (docs/webhooks.md): admins create and delete them
// and redeliver; operators and admins read them and their delivery logs.
// Secrets are never answered (berth.Webhook does not encode them).

// defaultDeliveries is how many deliveries a log listing answers unless
// ?limit= says otherwise.
const defaultDeliveries = 100

// webhooksEnabled reports whether the server has a webhook dispatcher,
// writing 404 when it has none.
func (s *Server) webhooksEnabled(w http.ResponseWriter, r *http.Request) bool {
	if s.Webhooks == nil {
		writeError(w, r, berth.Errorf(berth.ECodeNotFound, "webhooks are not enabled"))
		return false
	}
	return true
}

// createWebhook answers POST /api/v1/webhooks: 201 with the webhook
// (secret_set, never the secret); 400 naming the field for bad input.
func (s *Server) createWebhook(w http.ResponseWriter, r *http.Request) {
	if !s.webhooksEnabled(w, r) {
		return
	}
	var req berth.WebhookRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	hook, err := s.Webhooks.Create(r.Context(), req, identity(r).Name, func(h *berth.Webhook) error {
		return s.sec.record(r, "webhook.created", "webhook/"+h.ID, webhookFields(h))
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, hook)
}

// webhookFields are what the audit log records of h: its URL without
// credentials, its events and whether it has a secret.
func webhookFields(h *berth.Webhook) map[string]string {
	where := h.URL
	if u, err := url.Parse(h.URL); err == nil {
		u.User = nil
		if u.RawQuery != "" {
			u.RawQuery = "…" // may carry a token
		}
		where = u.String()
	}
	events := strings.Join(h.Events, ",")
	if events == "" {
		events = "*"
	}
	return map[string]string{"url": where, "events": events, "secret_set": strconv.FormatBool(h.SecretSet)}
}

// listWebhooks answers GET /api/v1/webhooks: {"webhooks":[...]}, oldest
// first.
func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request) {
	if !s.webhooksEnabled(w, r) {
		return
	}
	hooks, err := s.Webhooks.Webhooks(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	if hooks == nil {
		hooks = []*berth.Webhook{}
	}
	writeJSON(w, http.StatusOK, berth.WebhookList{Webhooks: hooks})
}

// deleteWebhook answers DELETE /api/v1/webhooks/{id}: 204, or 404 for an
// unknown id. Its delivery log goes with it.
func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request) {
	if !s.webhooksEnabled(w, r) {
		return
	}
	err := s.Webhooks.Delete(r.Context(), r.PathValue("id"), func(h *berth.Webhook) error {
		return s.sec.record(r, "webhook.deleted", "webhook/"+h.ID, webhookFields(h))
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// listDeliveries answers GET /api/v1/webhooks/{id}/deliveries?limit=N:
// {"deliveries":[...]}, newest first, at most N (default 100, 0: all);
// 404 for an unknown webhook.
func (s *Server) listDeliveries(w http.ResponseWriter, r *http.Request) {
	if !s.webhooksEnabled(w, r) {
		return
	}
	limit, err := wholeQuery(r, "limit", defaultDeliveries, "0 for all")
	if err != nil {
		writeError(w, r, err)
		return
	}
	ds, err := s.Webhooks.Deliveries(r.Context(), r.PathValue("id"), limit)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if ds == nil {
		ds = []*berth.Delivery{}
	}
	writeJSON(w, http.StatusOK, berth.DeliveryList{Deliveries: ds})
}

// redeliver answers POST /api/v1/deliveries/{id}/redeliver: 202 with the
// delivery queued for an attempt now; 404 for an unknown id.
func (s *Server) redeliver(w http.ResponseWriter, r *http.Request) {
	if !s.webhooksEnabled(w, r) {
		return
	}
	id := r.PathValue("id")
	dl, err := s.Webhooks.Delivery(r.Context(), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.sec.record(r, "webhook.redelivered", "webhook/"+dl.WebhookID,
		map[string]string{"delivery": dl.ID, "event": dl.EventType}); err != nil {
		writeError(w, r, err)
		return
	}
	if dl, err = s.Webhooks.Redeliver(r.Context(), id); err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, dl)
}
