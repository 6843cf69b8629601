package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/berth-dev/berth"
)

// Peers lists the federation peers, by name, with their live status.
func (c *Client) Peers(ctx context.Context) ([]*berth.PeerInfo, error) {
	var out berth.PeerList
	err := c.do(ctx, http.MethodGet, "/api/v1/peers", nil, &out)
	return out.Peers, err
}

// Peer returns the federation peer name with its live status; an unknown
// name is the server's not_found error.
func (c *Client) Peer(ctx context.Context, name string) (*berth.PeerInfo, error) {
	var out berth.PeerInfo
	if err := c.do(ctx, http.MethodGet, "/api/v1/peers/"+url.PathEscape(name), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PutPeer adds the federation peer p.Name, or changes it (a p without a
// token keeps the stored one), and returns it as stored, without its
// token. The server's invalid error names the offending field.
func (c *Client) PutPeer(ctx context.Context, p *berth.Peer) (*berth.PeerInfo, error) {
	var out berth.PeerInfo
	if err := c.do(ctx, http.MethodPut, "/api/v1/peers/"+url.PathEscape(p.Name), p, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeletePeer removes the federation peer name. While it holds active jobs
// the server refuses (conflict) unless force.
func (c *Client) DeletePeer(ctx context.Context, name string, force bool) error {
	path := "/api/v1/peers/" + url.PathEscape(name)
	if force {
		path += "?force=true"
	}
	return c.do(ctx, http.MethodDelete, path, nil, nil)
}
