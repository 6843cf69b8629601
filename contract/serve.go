package contract

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/gateway"
	"github.com/berth-dev/berth/internal/strict"
)

// Server serves a registry's contracts to API clients: GET /v1/contracts
// lists them and POST /v1/contracts/{name} calls one. Its handlers run
// behind the gateway's authentication and rate limit (Mount), and call
// the models through the gateway's router for the request's caller.
type Server struct {
	Registry *Registry
	Gateway  gateway.Completer
}

// Mount serves reg's contracts on g: GET /v1/contracts and
// POST /v1/contracts/{name}.
func Mount(g *gateway.Gateway, reg *Registry) {
	s := &Server{Registry: reg, Gateway: g}
	g.Handle("GET /v1/contracts", s.List)
	g.Handle("POST /v1/contracts/{name}", s.Run)
}

// viaGateway is the Models that calls the gateway for one caller.
type viaGateway struct {
	g      gateway.Completer
	caller *gateway.Caller
}

func (v viaGateway) ChatCompletion(ctx context.Context, model string, body []byte) (*Reply, error) {
	rep, err := v.g.ChatCompletion(ctx, v.caller, model, body)
	var ge *gateway.Error
	switch {
	case err == nil:
		return &Reply{Status: rep.Status, Header: rep.Header, Body: rep.Body}, nil
	case ctx.Err() == nil && errors.As(err, &ge):
		ue := &UpstreamError{Status: ge.Status, Message: ge.Message}
		if ge.RetryAfter > 0 {
			ue.RetryAfter = strconv.Itoa(int(math.Ceil(ge.RetryAfter.Seconds())))
		}
		return nil, ue
	}
	return nil, err
}

// List answers GET /v1/contracts: {"object":"list","data":[…]}, by name.
func (s *Server) List(w http.ResponseWriter, r *http.Request) {
	out, err := s.Registry.Listing(r.Context())
	if err != nil {
		writeFailure(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// Run answers POST /v1/contracts/{name}: the contract's Result, with
// Result.Status as the HTTP status. An unknown contract is 404; a model
// the caller may not use is 403; a body that is not a ContractRequest,
// or larger than the contract's images allow, is input_rejected.
func (s *Server) Run(w http.ResponseWriter, r *http.Request) {
	c, err := s.Registry.Get(r.Context(), r.PathValue("name"))
	if err != nil {
		writeFailure(w, err)
		return
	}
	caller := gateway.CallerOf(r)
	if caller == nil || !caller.Allows(c.Model) {
		writeFailure(w, berth.Errorf(berth.ECodeForbidden, "contract %s uses model %s, which this API key may not use", c.Name, c.Model))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, c.bodyLimit()+1))
	if err == nil && int64(len(body)) > c.bodyLimit() {
		err = &berth.Error{Code: berth.ECodeTooLarge, Field: "body", Message: fmt.Sprintf("larger than contract %s allows (%d bytes)", c.Name, c.bodyLimit())}
	}
	var req berth.ContractRequest
	if err == nil {
		err = strict.DecodeJSON(body, &req)
	}
	if err != nil {
		res := &Result{Contract: c.Name, Model: c.Model}
		res.Error = &berth.ContractFailure{Type: berth.ContractInputRejected, Code: berth.ContractInputRejected, Message: err.Error()}
		status := res.Status()
		if be, ok := err.(*berth.Error); ok {
			res.Error.Message, res.Error.Param = be.Text(), be.Field
			if be.Code == berth.ECodeTooLarge {
				status = http.StatusRequestEntityTooLarge
			}
		}
		s.Registry.calls.count(c.Name, res)
		writeJSON(w, status, res)
		return
	}
	res := c.Run(r.Context(), viaGateway{s.Gateway, caller}, &req)
	s.Registry.calls.count(c.Name, res)
	if res.Error != nil && res.Error.RetryAfter != "" {
		w.Header().Set("Retry-After", res.Error.RetryAfter)
	}
	writeJSON(w, res.Status(), res)
}

// bodyLimit is the largest request body c accepts: its images at their
// limit, in base64, and room for the inputs.
func (c *Contract) bodyLimit() int64 {
	const room = 1 << 20
	if c.Images == nil {
		return room
	}
	return int64(c.Images.Max)*(int64(c.Images.MaxBytes)*4/3+64) + room
}

// writeFailure answers err, an error that is not a call's failure, in the
// shape of one: {"error": {"type", "code", "message"}}.
func writeFailure(w http.ResponseWriter, err error) {
	code := berth.ErrorCode(err)
	status := http.StatusInternalServerError
	switch code {
	case berth.ECodeNotFound:
		status = http.StatusNotFound
	case berth.ECodeForbidden:
		status = http.StatusForbidden
	}
	msg := err.Error()
	if be, ok := err.(*berth.Error); ok {
		msg = be.Text()
	}
	writeJSON(w, status, map[string]any{"error": &berth.ContractFailure{Type: code, Code: code, Message: msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
