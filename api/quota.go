package api

import (
	"net/http"

	"github.com/berth-dev/berth"
)

func (s *Server) listQuotas(w http.ResponseWriter, r *http.Request) {
	list, err := s.reads.Quotas(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	if list == nil {
		list = []*berth.QuotaRule{}
	}
	writeJSON(w, http.StatusOK, berth.QuotaList{Quotas: list})
}

// putQuota creates or replaces the rule named by the path from a body of
// limits decoded over DefaultQuotaRule. The body may repeat scope and name
// (a rule as GET returns it) but not contradict the path; updated_at is
// the server's to set.
func (s *Server) putQuota(w http.ResponseWriter, r *http.Request) {
	scope, name, err := berth.ParseQuotaID(r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	q := berth.DefaultQuotaRule()
	q.Scope, q.Name = scope, name
	if err := decode(r, &q); err != nil {
		writeError(w, r, err)
		return
	}
	if q.Scope != scope {
		writeError(w, r, berth.Invalidf("scope", "%q differs from the rule id's scope %q", q.Scope, scope))
		return
	}
	if q.Name != name {
		writeError(w, r, berth.Invalidf("name", "%q differs from the rule id's name %q", q.Name, name))
		return
	}
	rule, created, err := s.ctl.SetQuota(r.Context(), q)
	if err != nil {
		writeError(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, rule)
}

func (s *Server) deleteQuota(w http.ResponseWriter, r *http.Request) {
	if err := s.ctl.DeleteQuota(r.Context(), r.PathValue("id")); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
