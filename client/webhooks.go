package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/berth-dev/berth"
)

// CreateWebhook subscribes a URL to events (POST /api/v1/webhooks; admins
// only) and returns the webhook, without its secret. Bad input is the
// server's ECodeInvalid error naming the field; a server without webhooks
// answers ECodeNotFound.
func (c *Client) CreateWebhook(ctx context.Context, req berth.WebhookRequest) (*berth.Webhook, error) {
	var out berth.Webhook
	if err := c.do(ctx, http.MethodPost, "/api/v1/webhooks", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Webhooks lists the webhooks, oldest first (GET /api/v1/webhooks;
// operators and admins), or returns the server's error.
func (c *Client) Webhooks(ctx context.Context) ([]*berth.Webhook, error) {
	var out berth.WebhookList
	if err := c.do(ctx, http.MethodGet, "/api/v1/webhooks", nil, &out); err != nil {
		return nil, err
	}
	return out.Webhooks, nil
}

// DeleteWebhook deletes webhook id and its delivery log (DELETE
// /api/v1/webhooks/{id}; admins only); an unknown id is the server's
// ECodeNotFound error.
func (c *Client) DeleteWebhook(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/api/v1/webhooks/"+url.PathEscape(id), nil, nil)
}

// Deliveries returns up to limit (0: all) of webhook id's deliveries,
// newest first (GET /api/v1/webhooks/{id}/deliveries); an unknown webhook
// is the server's ECodeNotFound error.
func (c *Client) Deliveries(ctx context.Context, id string, limit int) ([]*berth.Delivery, error) {
	var out berth.DeliveryList
	path := "/api/v1/webhooks/" + url.PathEscape(id) + "/deliveries?limit=" + strconv.Itoa(limit)
	if err := c.do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return out.Deliveries, nil
}

// Redeliver queues delivery id for an attempt now (POST
// /api/v1/deliveries/{id}/redeliver; admins only) and returns it as
// queued; an unknown id is the server's ECodeNotFound error.
func (c *Client) Redeliver(ctx context.Context, id string) (*berth.Delivery, error) {
	var out berth.Delivery
	if err := c.do(ctx, http.MethodPost, "/api/v1/deliveries/"+url.PathEscape(id)+"/redeliver", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
