package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/berth-dev/berth"
)

// Contracts lists the extraction contracts, by name (GET /api/v1/contracts).
func (c *Client) Contracts(ctx context.Context) ([]*berth.ContractInfo, error) {
	var out berth.ContractList
	if err := c.do(ctx, http.MethodGet, "/api/v1/contracts", nil, &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}

// Contract returns one contract (GET /api/v1/contracts/{name}); an
// unknown name is the server's ECodeNotFound error.
func (c *Client) Contract(ctx context.Context, name string) (*berth.ContractInfo, error) {
	var out berth.ContractInfo
	if err := c.do(ctx, http.MethodGet, "/api/v1/contracts/"+url.PathEscape(name), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PutContract stores doc, a contract document (YAML or JSON), as it is:
// a new contract (POST /api/v1/contracts), or, with replace, in place of
// the stored contract it names (PUT /api/v1/contracts/{name}). Admins
// only; a document that does not parse is the server's invalid error
// naming the field.
func (c *Client) PutContract(ctx context.Context, name string, doc []byte, replace bool) (*berth.ContractInfo, error) {
	method, path := http.MethodPost, "/api/v1/contracts"
	if replace {
		method, path = http.MethodPut, path+"/"+url.PathEscape(name)
	}
	resp, err := c.sendBody(ctx, method, path, doc)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, responseError(method, path, resp)
	}
	defer resp.Body.Close()
	var out berth.ContractInfo
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("%s %s: decode response: %w", method, path, err)
	}
	return &out, nil
}

// DeleteContract deletes a contract stored through the API (DELETE
// /api/v1/contracts/{name}; admins only).
func (c *Client) DeleteContract(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/api/v1/contracts/"+url.PathEscape(name), nil, nil)
}

// RunContract calls contract name with req (POST /v1/contracts/{name})
// and returns its result, a failed one too (its Error, with the model's
// raw reply), and the HTTP status it came with. An answer that is no
// result (a refused key, an unknown contract) is an error.
func (c *Client) RunContract(ctx context.Context, name string, req *berth.ContractRequest) (*berth.ContractResult, int, error) {
	path := "/v1/contracts/" + url.PathEscape(name)
	body, err := json.Marshal(req)
	if err != nil {
		return nil, 0, fmt.Errorf("encode request: %w", err)
	}
	resp, err := c.sendBody(ctx, http.MethodPost, path, body)
	if err != nil {
		return nil, 0, err
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, resp.StatusCode, fmt.Errorf("POST %s: read response: %w", path, err)
	}
	var res berth.ContractResult
	if json.Unmarshal(data, &res) == nil && res.Contract != "" {
		return &res, resp.StatusCode, nil
	}
	resp.Body = io.NopCloser(bytes.NewReader(data))
	return nil, resp.StatusCode, responseError(http.MethodPost, path, resp)
}

// sendBody sends body as it is to the servers in turn until one answers,
// whatever its status, and returns that answer, whose body the caller
// closes. A request that may have reached a server is not sent again.
func (c *Client) sendBody(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	round := c.servers.Round()
	var err error
	for server, ok := round.Next(""); ok; server, ok = round.Next("") {
		var resp *http.Response
		var written bool
		if resp, written, err = c.sendTo(ctx, server, method, path, body); err == nil {
			round.Answered()
			return resp, nil
		}
		if ctx.Err() != nil || written {
			return nil, err
		}
	}
	return nil, round.Failed(err)
}
