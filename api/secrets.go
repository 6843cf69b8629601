package api

import (
	"net/http"

	"github.com/berth-dev/berth"
)

// maxSecretSize is the largest secret value accepted.
const maxSecretSize = 64 << 10

func (s *Server) putSecret(w http.ResponseWriter, r *http.Request) {
	var req berth.SecretRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	owner, err := secretOwner(r, req.Owner)
	if err != nil {
		writeError(w, r, err)
		return
	}
	switch {
	case req.Value == "":
		err = berth.Invalidf("value", "must not be empty")
	case len(req.Value) > maxSecretSize:
		err = berth.Invalidf("value", "must be at most %d bytes", maxSecretSize)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	name := r.PathValue("name")
	sec, err := s.sec.Secrets.Set(r.Context(), owner, name, req.Value, identity(r).Name, func() error {
		return s.sec.record(r, "secret.set", "secret/"+owner+"/"+name, nil)
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sec)
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) {
	owner := r.URL.Query().Get("owner")
	if owner == "*" && identity(r).IsAdmin() {
		owner = "" // every owner's
	} else {
		var err error
		if owner, err = secretOwner(r, owner); err != nil {
			writeError(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, berth.SecretList{Secrets: s.sec.Secrets.List(owner)})
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) {
	owner, err := secretOwner(r, r.URL.Query().Get("owner"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	name := r.PathValue("name")
	if err := s.sec.Secrets.Delete(r.Context(), owner, name, func() error {
		return s.sec.record(r, "secret.deleted", "secret/"+owner+"/"+name, nil)
	}); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
