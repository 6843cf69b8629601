package api

import (
	"net/http"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/auth"
)

// Extraction contracts (docs/contracts.md): people list and read them;
// admins store, replace and delete the contracts kept in the store (those
// of the server's --contracts directory change with their files). Calls
// of a contract go through the gateway: POST /v1/contracts/{name}.

// contractRoutes registers the /api/v1/contracts endpoints.
func (s *Server) contractRoutes() {
	route := func(pattern string, allow func(auth.Identity) bool, need string, h http.HandlerFunc) {
		s.route(pattern, allow, need, func(w http.ResponseWriter, r *http.Request) {
			if s.Contracts == nil {
				writeError(w, r, berth.Errorf(berth.ECodeNotFound, "extraction contracts are not enabled on this server"))
				return
			}
			h(w, r)
		})
	}
	route("GET /api/v1/contracts", auth.Identity.IsPerson, people, s.listContracts)
	route("GET /api/v1/contracts/{name}", auth.Identity.IsPerson, people, s.getContract)
	route("POST /api/v1/contracts", auth.Identity.IsAdmin, "admin", s.putContract(false))
	route("PUT /api/v1/contracts/{name}", auth.Identity.IsAdmin, "admin", s.putContract(true))
	route("DELETE /api/v1/contracts/{name}", auth.Identity.IsAdmin, "admin", s.deleteContract)
}

// listContracts answers GET /api/v1/contracts: {"object":"list","data":[…]},
// by name.
func (s *Server) listContracts(w http.ResponseWriter, r *http.Request) {
	out, err := s.Contracts.Listing(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getContract(w http.ResponseWriter, r *http.Request) {
	c, err := s.Contracts.Get(r.Context(), r.PathValue("name"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, c.Info())
}

// putContract answers POST /api/v1/contracts (create: 201) or, with
// replace, PUT /api/v1/contracts/{name} (200): the body is the contract's
// document, YAML or JSON, stored once it parses, then audited.
func (s *Server) putContract(replace bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := readBody(r)
		if err != nil {
			writeError(w, r, err)
			return
		}
		c, err := s.Contracts.Put(r.Context(), body, identity(r).Name, r.PathValue("name"))
		if err != nil {
			writeError(w, r, err)
			return
		}
		action, status := "contract.created", http.StatusCreated
		if replace {
			action, status = "contract.replaced", http.StatusOK
		}
		if err := s.sec.record(r, action, "contract/"+c.Name, map[string]string{"model": c.Model}); err != nil {
			writeError(w, r, err)
			return
		}
		writeJSON(w, status, c.Info())
	}
}

func (s *Server) deleteContract(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := s.Contracts.Delete(r.Context(), name); err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.sec.record(r, "contract.deleted", "contract/"+name, nil); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
