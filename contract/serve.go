package contract

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/internal/strict"
)

// Server serves a registry's contracts to API clients: GET /v1/contracts
// lists them and POST /v1/contracts/{name} calls one. It does not
// authenticate: the gateway mounts its handlers behind its own.
type Server struct {
	Registry *Registry
	// Models returns what calls the models for request r: the gateway's
	// router, on behalf of r's caller.
	Models func(r *http.Request) Models
	// Allows, when set, reports whether r's caller may use model (a
	// token's model allow-list); nil: every model.
	Allows func(r *http.Request, model string) bool
}

// List answers GET /v1/contracts: {"object":"list","data":[…]}, by name.
func (s *Server) List(w http.ResponseWriter, r *http.Request) {
	cs, err := s.Registry.List(r.Context())
	if err != nil {
		writeFailure(w, err)
		return
	}
	out := berth.ContractList{Object: "list", Data: make([]*berth.ContractInfo, len(cs))}
	for i, c := range cs {
		out.Data[i] = c.Info()
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
	if s.Allows != nil && !s.Allows(r, c.Model) {
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
		writeJSON(w, status, res)
		return
	}
	res := c.Run(r.Context(), s.Models(r), &req)
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
