package api

import (
	"net/http"

	"github.com/berth-dev/berth"
)

// The swap endpoints of seed 000: POST /api/swap swaps what a pool of
// workers serves, GET /api/swap/{id} follows it, POST
// /api/swap/{key}/validate checks one could start. Without a catalog
// (Server.Swapper nil) they answer 404.

func (s *Server) startSwap(w http.ResponseWriter, r *http.Request) {
	if s.Swapper == nil {
		writeError(w, r, berth.Errorf(berth.ECodeNotFound, "no model catalog: start the server with --catalog FILE"))
		return
	}
	var req berth.SwapRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	if req.ModelKey == "" {
		writeError(w, r, berth.Invalidf("model_key", "required: a key of the model catalog"))
		return
	}
	if !req.DryRun {
		if err := s.sec.record(r, "swap.requested", "swap/"+req.ModelKey, map[string]string{"model_key": req.ModelKey}); err != nil {
			writeError(w, r, err)
			return
		}
	}
	sw, err := s.Swapper.Start(r.Context(), req.ModelKey, swapLockToken(r), identity(r).Name, req.DryRun)
	if err != nil {
		writeError(w, r, err)
		return
	}
	status := http.StatusAccepted
	if req.DryRun {
		status = http.StatusOK
	}
	writeJSON(w, status, sw)
}

func (s *Server) getSwap(w http.ResponseWriter, r *http.Request) {
	if s.Swapper == nil {
		writeError(w, r, berth.Errorf(berth.ECodeNotFound, "no model catalog: start the server with --catalog FILE"))
		return
	}
	sw, err := s.Swapper.Get(r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sw)
}

func (s *Server) validateSwap(w http.ResponseWriter, r *http.Request) {
	if s.Swapper == nil {
		writeError(w, r, berth.Errorf(berth.ECodeNotFound, "no model catalog: start the server with --catalog FILE"))
		return
	}
	v, err := s.Swapper.Validate(r.Context(), r.PathValue("key"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) catalog(w http.ResponseWriter, r *http.Request) {
	if s.Swapper == nil {
		writeJSON(w, http.StatusOK, map[string]any{"pools": map[string]any{}, "models": map[string]any{}})
		return
	}
	writeJSON(w, http.StatusOK, s.Swapper.Catalog)
}

func (s *Server) putCatalogModel(w http.ResponseWriter, r *http.Request) {
	if s.Swapper == nil {
		writeError(w, r, berth.Errorf(berth.ECodeNotFound, "no model catalog on this server"))
		return
	}
	var m berth.CatalogModel
	if err := decode(r, &m); err != nil {
		writeError(w, r, err)
		return
	}
	key := r.PathValue("key")
	if err := s.sec.record(r, "catalog.model_set", "catalog/"+key, map[string]string{"pool": m.Pool, "template": m.Template}); err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.Swapper.Catalog.Put(key, m); err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"model_key": key, "model": m})
}

func (s *Server) deleteCatalogModel(w http.ResponseWriter, r *http.Request) {
	if s.Swapper == nil {
		writeError(w, r, berth.Errorf(berth.ECodeNotFound, "no model catalog on this server"))
		return
	}
	key := r.PathValue("key")
	if err := s.sec.record(r, "catalog.model_deleted", "catalog/"+key, nil); err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.Swapper.Catalog.Delete(key); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
