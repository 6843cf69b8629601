package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/berth-dev/berth"
)

// Cloud pools (docs/pools.md); operators and admins only. A server without
// pools answers ECodeNotFound.

// PutPool creates or replaces pool p.Name (PUT /api/v1/pools/{name}) and
// returns it as stored, without its API key. Without p.APIKey a
// replacement keeps the stored key; creating a pool needs one. Bad input
// is the server's ECodeInvalid error naming the field.
func (c *Client) PutPool(ctx context.Context, p *berth.Pool) (*berth.PoolInfo, error) {
	var out berth.PoolInfo
	if err := c.do(ctx, http.MethodPut, "/api/v1/pools/"+url.PathEscape(p.Name), p, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Pools lists the pools by name, each with its live instances' counts and
// spend (GET /api/v1/pools).
func (c *Client) Pools(ctx context.Context) ([]*berth.PoolInfo, error) {
	var out berth.PoolList
	if err := c.do(ctx, http.MethodGet, "/api/v1/pools", nil, &out); err != nil {
		return nil, err
	}
	return out.Pools, nil
}

// Pool returns pool name (GET /api/v1/pools/{name}); an unknown name is
// the server's ECodeNotFound error.
func (c *Client) Pool(ctx context.Context, name string) (*berth.PoolInfo, error) {
	var out berth.PoolInfo
	if err := c.do(ctx, http.MethodGet, "/api/v1/pools/"+url.PathEscape(name), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeletePool removes pool name (DELETE /api/v1/pools/{name}). While it has
// live instances the server refuses (conflict) unless force.
func (c *Client) DeletePool(ctx context.Context, name string, force bool) error {
	path := "/api/v1/pools/" + url.PathEscape(name)
	if force {
		path += "?force=true"
	}
	return c.do(ctx, http.MethodDelete, path, nil, nil)
}

// Provision rents one instance for pool name and takes it through every
// readiness phase (POST /api/v1/pools/{name}/provision), returning once it
// is ready or has failed: the instance either way (its Phase and Failure
// say which). A server without a provisioner answers ECodeUnavailable.
func (c *Client) Provision(ctx context.Context, name string) (*berth.Instance, error) {
	var out berth.Instance
	if err := c.do(ctx, http.MethodPost, "/api/v1/pools/"+url.PathEscape(name)+"/provision", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Instances lists the rented instances, oldest first, of pool (every
// pool when ""), only the live ones (not destroyed) when live (GET
// /api/v1/instances).
func (c *Client) Instances(ctx context.Context, pool string, live bool) ([]*berth.Instance, error) {
	q := url.Values{}
	if pool != "" {
		q.Set("pool", pool)
	}
	if live {
		q.Set("live", "true")
	}
	path := "/api/v1/instances"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out berth.InstanceList
	if err := c.do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return out.Instances, nil
}

// Instance returns instance id with its timeline and probes (GET
// /api/v1/instances/{id}); an unknown id is the server's ECodeNotFound
// error.
func (c *Client) Instance(ctx context.Context, id string) (*berth.Instance, error) {
	var out berth.Instance
	if err := c.do(ctx, http.MethodGet, "/api/v1/instances/"+url.PathEscape(id), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DestroyInstance gives instance id back (DELETE /api/v1/instances/{id}):
// destroyed at its provider, its machine not blamed; it returns the
// instance as recorded then.
func (c *Client) DestroyInstance(ctx context.Context, id string) (*berth.Instance, error) {
	var out berth.Instance
	if err := c.do(ctx, http.MethodDelete, "/api/v1/instances/"+url.PathEscape(id), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Hosts lists provider's host records by machine id (GET
// /api/v1/hosts?provider=).
func (c *Client) Hosts(ctx context.Context, provider string) ([]*berth.HostRecord, error) {
	var out berth.HostList
	if err := c.do(ctx, http.MethodGet, "/api/v1/hosts?provider="+url.QueryEscape(provider), nil, &out); err != nil {
		return nil, err
	}
	return out.Hosts, nil
}

// BlockHost blocks provider's machine (no pool rents it) or, when !block,
// unblocks it and lifts its quarantine (POST
// /api/v1/hosts/{machine}/block or /unblock), returning its record.
func (c *Client) BlockHost(ctx context.Context, provider string, machine int64, block bool) (*berth.HostRecord, error) {
	verb := "unblock"
	if block {
		verb = "block"
	}
	var out berth.HostRecord
	path := "/api/v1/hosts/" + strconv.FormatInt(machine, 10) + "/" + verb + "?provider=" + url.QueryEscape(provider)
	if err := c.do(ctx, http.MethodPost, path, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ClearHosts forgets every host record of provider (DELETE
// /api/v1/hosts?provider=) and returns how many there were.
func (c *Client) ClearHosts(ctx context.Context, provider string) (int, error) {
	var out berth.HostsCleared
	if err := c.do(ctx, http.MethodDelete, "/api/v1/hosts?provider="+url.QueryEscape(provider), nil, &out); err != nil {
		return 0, err
	}
	return out.Deleted, nil
}
