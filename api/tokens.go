package api

import (
	"net/http"
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
	s.issue(w, r, req.Name, role, "", time.Duration(req.TTL), "token.created")
}

// issue makes a token, audited as action, and answers with it: 201 and,
// this once, the token itself.
func (s *Server) issue(w http.ResponseWriter, r *http.Request, name string, role auth.Role, worker string, ttl time.Duration, action string) {
	by := identity(r).Name
	tok, err := s.sec.Tokens.Issue(r.Context(), auth.Grant{Name: name, Role: role, Worker: worker, TTL: ttl, By: by},
		func(t *berth.Token) error {
			fields := map[string]string{"name": t.Name, "role": t.Role}
			if t.Worker != "" {
				fields["worker"] = t.Worker
			}
			if !t.ExpiresAt.IsZero() {
				fields["expires_at"] = t.ExpiresAt.Format(time.RFC3339)
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
	s.issue(w, r, req.Host, auth.RoleAgent, req.Host, 0, "agent.joined")
}
