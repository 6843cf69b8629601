package api

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/auth"
)

// maxTokenTTL is the longest lifetime a token may be given.
const maxTokenTTL = 10 * 365 * 24 * time.Hour

func (s *Server) createToken(w http.ResponseWriter, r *http.Request) {
	var req berth.TokenRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	if !validIdentityName(req.Name) {
		writeError(w, r, berth.Invalidf("name", "%q: must be 1–64 letters, digits or ._@-", req.Name))
		return
	}
	role, err := auth.ParseRole(req.Role)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if req.TTL < 0 || time.Duration(req.TTL) > maxTokenTTL {
		writeError(w, r, berth.Invalidf("ttl", "must be between 0 (never expires) and 10 years"))
		return
	}
	if err := berth.ValidateGatewayLimits(req.Models, req.RPM); err != nil {
		writeError(w, r, err)
		return
	}
	s.issue(w, r, auth.Grant{Name: req.Name, Role: role, TTL: time.Duration(req.TTL), Models: req.Models, RPM: req.RPM}, "token.created")
}

// issue makes a token, audited as action, and answers with it: 201 and,
// this once, the token itself.
func (s *Server) issue(w http.ResponseWriter, r *http.Request, g auth.Grant, action string) {
	g.By = identity(r).Name
	tok, err := s.sec.Tokens.Issue(r.Context(), g,
		func(t *berth.Token) error {
			fields := map[string]string{"name": t.Name, "role": t.Role}
			if t.Worker != "" {
				fields["worker"] = t.Worker
			}
			if !t.ExpiresAt.IsZero() {
				fields["expires_at"] = t.ExpiresAt.Format(time.RFC3339)
			}
			if len(t.Models) > 0 {
				fields["models"] = strings.Join(t.Models, ",")
			}
			if t.RPM > 0 {
				fields["rpm"] = strconv.Itoa(t.RPM)
			}
			return s.sec.record(r, action, "token/"+t.ID, fields)
		})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, tok)
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, berth.TokenList{Tokens: s.sec.Tokens.List()})
}

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	tok, err := s.sec.Tokens.Revoke(r.Context(), id, func(t *berth.Token) error {
		return s.sec.record(r, "token.revoked", "token/"+t.ID, map[string]string{"name": t.Name, "role": t.Role})
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, tok)
}

// join trades a join token for a credential of the agent's own, bound to
// the host it names.
func (s *Server) join(w http.ResponseWriter, r *http.Request) {
	var req berth.JoinRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	if err := berth.ValidHost("host", req.Host); err != nil {
		writeError(w, r, err)
		return
	}
	s.issue(w, r, auth.Grant{Name: req.Host, Role: auth.RoleAgent, Worker: req.Host}, "agent.joined")
}
