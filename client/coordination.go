package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/berth-dev/berth"
)

// AcquireSwapLock takes the swap lock for req.Holder, or extends it when
// req.Token is the held lock's (POST /api/swap/lock), and returns the lock
// with its token. Another holder holding it is the server's ECodeConflict
// error, a missing or wrong token of the same holder ECodeForbidden.
func (c *Client) AcquireSwapLock(ctx context.Context, req berth.SwapLockRequest) (berth.SwapLockState, error) {
	var st berth.SwapLockState
	err := c.do(ctx, http.MethodPost, "/api/swap/lock", req, &st)
	return st, err
}

// SwapLock returns the swap lock's public state (GET /api/swap/lock).
func (c *Client) SwapLock(ctx context.Context) (berth.SwapLockState, error) {
	var st berth.SwapLockState
	err := c.do(ctx, http.MethodGet, "/api/swap/lock", nil, &st)
	return st, err
}

// ReleaseSwapLock releases the swap lock with its token, or any lock with
// force (DELETE /api/swap/lock); a wrong or missing token while it is held
// is the server's ECodeForbidden error.
func (c *Client) ReleaseSwapLock(ctx context.Context, token string, force bool) (berth.SwapLockRelease, error) {
	q := url.Values{}
	if token != "" {
		q.Set("token", token)
	}
	if force {
		q.Set("force", "true")
	}
	path := "/api/swap/lock"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out berth.SwapLockRelease
	err := c.do(ctx, http.MethodDelete, path, nil, &out)
	return out, err
}

// PutSchedule registers or updates a schedule (POST /api/schedule) and
// returns the entry stored; bad input is the server's ECodeInvalid error.
func (c *Client) PutSchedule(ctx context.Context, req berth.ScheduleRequest) (*berth.Schedule, error) {
	var s berth.Schedule
	if err := c.do(ctx, http.MethodPost, "/api/schedule", req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Schedules returns the schedule registry (GET /api/schedule).
func (c *Client) Schedules(ctx context.Context) ([]*berth.Schedule, error) {
	var l berth.ScheduleList
	if err := c.do(ctx, http.MethodGet, "/api/schedule", nil, &l); err != nil {
		return nil, err
	}
	return l.Schedules, nil
}

// DeleteSchedule deregisters schedule id (DELETE /api/schedule/{id}); an
// unknown id is the server's ECodeNotFound error.
func (c *Client) DeleteSchedule(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/api/schedule/"+url.PathEscape(id), nil, nil)
}

// Swap starts a model swap (POST /api/swap) with the swap lock's token
// ("" for none): a dry run answers what it would do and touches nothing.
// A lock held by another is the server's ECodeLocked error, a swap already
// running on the pool ECodeConflict.
func (c *Client) Swap(ctx context.Context, req berth.SwapRequest, token string) (*berth.Swap, error) {
	var out berth.Swap
	path := "/api/swap"
	if token != "" {
		path += "?token=" + url.QueryEscape(token)
	}
	return &out, c.do(ctx, http.MethodPost, path, req, &out)
}

// GetSwap returns a swap by id (GET /api/swap/{id}).
func (c *Client) GetSwap(ctx context.Context, id string) (*berth.Swap, error) {
	var out berth.Swap
	return &out, c.do(ctx, http.MethodGet, "/api/swap/"+url.PathEscape(id), nil, &out)
}

// ValidateSwap checks whether a swap to key could start now (POST
// /api/swap/{key}/validate).
func (c *Client) ValidateSwap(ctx context.Context, key string) (*berth.SwapValidation, error) {
	var out berth.SwapValidation
	return &out, c.do(ctx, http.MethodPost, "/api/swap/"+url.PathEscape(key)+"/validate", nil, &out)
}

// Catalog returns the GPU arbiter's model catalog (GET /api/v1/catalog) as
// JSON: {"pools": …, "models": …}.
func (c *Client) Catalog(ctx context.Context) (json.RawMessage, error) {
	var out json.RawMessage
	return out, c.do(ctx, http.MethodGet, "/api/v1/catalog", nil, &out)
}

// PutCatalogModel adds or replaces model key of the catalog; an invalid
// model is the server's ECodeInvalid error naming the field.
func (c *Client) PutCatalogModel(ctx context.Context, key string, m berth.CatalogModel) error {
	return c.do(ctx, http.MethodPut, "/api/v1/catalog/models/"+url.PathEscape(key), m, nil)
}

// DeleteCatalogModel removes model key of the catalog.
func (c *Client) DeleteCatalogModel(ctx context.Context, key string) error {
	return c.do(ctx, http.MethodDelete, "/api/v1/catalog/models/"+url.PathEscape(key), nil, nil)
}
