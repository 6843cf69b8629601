package api

import (
	"net/http"
	"slices"

	"github.com/berth-dev/berth"
)

func (s *Server) services(w http.ResponseWriter, r *http.Request) {
	list, err := s.ctl.Services(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	if who := identity(r); !who.SeesAllJobs() {
		list = slices.DeleteFunc(list, func(svc *berth.Service) bool { return svc.User != who.Name })
	}
	if list == nil {
		list = []*berth.Service{}
	}
	writeJSON(w, http.StatusOK, berth.ServiceList{Services: list})
}

func (s *Server) endpoints(w http.ResponseWriter, r *http.Request) {
	list, err := s.ctl.Endpoints(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	if who := identity(r); !who.SeesAllJobs() {
		list = slices.DeleteFunc(list, func(e *berth.Endpoint) bool { return e.User != who.Name })
	}
	if list == nil {
		list = []*berth.Endpoint{}
	}
	writeJSON(w, http.StatusOK, berth.EndpointList{Endpoints: list})
}
