package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/berth-dev/berth"
)

// The federation peer protocol (docs/federation.md), as an origin calls
// it on a peer with the peer token the peer minted for it.

// Handoff delivers one root job to the peer (POST
// /api/v1/federation/handoffs). A repeat of the same (remote id, nonce)
// answers the job the first delivery created, Duplicate set.
func (c *Client) Handoff(ctx context.Context, req *berth.HandoffRequest) (*berth.HandoffResponse, error) {
	var out berth.HandoffResponse
	return &out, c.do(ctx, http.MethodPost, "/api/v1/federation/handoffs", req, &out)
}

// FederationChanges pulls the changes to the caller's received jobs after
// cursor (GET /api/v1/federation/changes), at most limit of them (0: the
// peer's default). The cursor travels as "EPOCH.SEQ.TAG"; "" asks for a
// full resync. Pulling with a cursor acknowledges it.
func (c *Client) FederationChanges(ctx context.Context, cursor string, limit int) (*berth.FederationChanges, error) {
	q := url.Values{"cursor": {cursor}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out berth.FederationChanges
	return &out, c.do(ctx, http.MethodGet, "/api/v1/federation/changes?"+q.Encode(), nil, &out)
}

// FederationCancel asks the peer to cancel a job it received (POST
// /api/v1/federation/cancels). A job the peer does not know is its
// *berth.Error of code ECodeNotFound, which satisfies the cancel.
func (c *Client) FederationCancel(ctx context.Context, req *berth.FederationCancel) (*berth.FederationCancelResponse, error) {
	var out berth.FederationCancelResponse
	return &out, c.do(ctx, http.MethodPost, "/api/v1/federation/cancels", req, &out)
}

// PeerCapacity reads the peer's capability heartbeat (GET
// /api/v1/federation/capacity).
func (c *Client) PeerCapacity(ctx context.Context) (*berth.PeerCapacity, error) {
	var out berth.PeerCapacity
	return &out, c.do(ctx, http.MethodGet, "/api/v1/federation/capacity", nil, &out)
}

// OpenLogs asks once for job id's output with query (follow, attempt,
// offset, format: as GET /api/v1/jobs/{id}/logs takes them) and returns
// the answer, whose body the caller reads and closes: the raw stream, for
// a server that passes it on (a federated job's logs read through its
// origin). An error answer is the server's *berth.Error.
func (c *Client) OpenLogs(ctx context.Context, id string, query url.Values) (*http.Response, error) {
	path := "/api/v1/jobs/" + url.PathEscape(id) + "/logs"
	if len(query) > 0 {
		path += "?" + query.Encode()
	}
	return c.send(ctx, http.MethodGet, path, nil)
}

// Answered reports whether err is a server's answer (an error status)
// rather than a failure to reach it or to read its answer whole. A 502,
// 503 or 504 whose body is not a Berth error is a gateway in front of the
// server saying it could not reach it: no answer from the server.
func Answered(err error) bool {
	var be *berth.Error
	var se *statusError
	var te *transportError
	switch {
	case errors.As(err, &te):
		return false
	case errors.As(err, &be):
		return true
	case errors.As(err, &se):
		return se.code != http.StatusBadGateway && se.code != http.StatusServiceUnavailable && se.code != http.StatusGatewayTimeout
	}
	return false
}

// Final reports whether err is a refusal that sending the same request
// again cannot change: the request is invalid (400) or too large (413),
// the caller is forbidden it (403), or it conflicts with a rule (409: a
// quota rule, a job that could never run). Everything else (no answer, a
// timeout, 401, 404, 429, 5xx) may pass later. A federation origin marks a
// handoff refused finally as rejected and retries the others.
func Final(err error) bool {
	var te *transportError
	if err == nil || errors.As(err, &te) {
		return false
	}
	var be *berth.Error
	if errors.As(err, &be) {
		switch be.Code {
		case berth.ECodeInvalid, berth.ECodeTooLarge, berth.ECodeForbidden, berth.ECodeConflict, berth.ECodeUnsatisfiable:
			return true
		}
		return false
	}
	var se *statusError
	if errors.As(err, &se) {
		switch se.code {
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusForbidden, http.StatusConflict:
			return true
		}
	}
	return false
}

// NotFound reports whether err is a server's 404 answer.
func NotFound(err error) bool {
	var te *transportError
	if errors.As(err, &te) {
		return false
	}
	var be *berth.Error
	if errors.As(err, &be) {
		return be.Code == berth.ECodeNotFound
	}
	var se *statusError
	return errors.As(err, &se) && se.code == http.StatusNotFound
}
