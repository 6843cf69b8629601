package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/berth-dev/berth"
)

// Execution backends (docs/kubernetes.md): admins add and remove them;
// anyone who may list workers lists them.

// AddBackend adds backend spec (POST /api/v1/backends), its credentials
// in plain text (a Kubernetes backend's Kubeconfig), and returns it as
// stored, without them, with its status. Bad input, or a spec the
// server's backend kind refuses, is the server's ECodeInvalid error
// naming the field; a name in use is ECodeConflict.
func (c *Client) AddBackend(ctx context.Context, spec *berth.BackendSpec) (*berth.BackendInfo, error) {
	var out berth.BackendInfo
	if err := c.do(ctx, http.MethodPost, "/api/v1/backends", spec, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Backends lists the backends (GET /api/v1/backends): the agent pool
// first, then the others by name, each with its status.
func (c *Client) Backends(ctx context.Context) ([]berth.BackendInfo, error) {
	var out berth.BackendList
	if err := c.do(ctx, http.MethodGet, "/api/v1/backends", nil, &out); err != nil {
		return nil, err
	}
	return out.Backends, nil
}

// Backend returns backend name (GET /api/v1/backends/{name}); an unknown
// name is the server's ECodeNotFound error.
func (c *Client) Backend(ctx context.Context, name string) (*berth.BackendInfo, error) {
	var out berth.BackendInfo
	if err := c.do(ctx, http.MethodGet, "/api/v1/backends/"+url.PathEscape(name), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RemoveBackend removes backend name (DELETE /api/v1/backends/{name}).
// While attempts run there the server refuses (conflict) unless force.
func (c *Client) RemoveBackend(ctx context.Context, name string, force bool) error {
	path := "/api/v1/backends/" + url.PathEscape(name)
	if force {
		path += "?force=true"
	}
	return c.do(ctx, http.MethodDelete, path, nil, nil)
}
