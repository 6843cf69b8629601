package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/arbiter"
	"github.com/berth-dev/berth/audit"
)

// servicesData is the services page.
type servicesData struct {
	Services  []serviceRow
	Endpoints []*berth.Endpoint
}

// serviceRow is one active service with its endpoint, when it serves.
type serviceRow struct {
	*berth.Service
	Endpoint *berth.Endpoint
	Restarts int
}

// services lists the active services (a user: its own) with their
// readiness phase, endpoint and restarts, and the ready endpoints.
func (h *Handler) services(r *http.Request) (string, any, error) {
	ctx := r.Context()
	list, err := h.cfg.Ctl.Services(ctx)
	if err != nil {
		return "", nil, err
	}
	eps, err := h.cfg.Ctl.Endpoints(ctx)
	if err != nil {
		return "", nil, err
	}
	if who := api.IdentityOf(r); !who.SeesAllJobs() {
		list = slices.DeleteFunc(list, func(s *berth.Service) bool { return s.User != who.Name })
		eps = slices.DeleteFunc(eps, func(e *berth.Endpoint) bool { return e.User != who.Name })
	}
	byAttempt := map[string]*berth.Endpoint{}
	for _, e := range eps {
		byAttempt[e.AttemptID] = e
	}
	d := &servicesData{Endpoints: eps}
	for _, s := range list {
		d.Services = append(d.Services, serviceRow{Service: s, Endpoint: byAttempt[s.AttemptID], Restarts: max(s.Attempts-1, 0)})
	}
	return "", d, nil
}

// schedulesData is the schedules page.
type schedulesData struct {
	Schedules []*berth.Schedule
}

// schedules lists the schedule registry; a job's spec is shown only to
// those who may see its user's jobs (as GET /api/schedule does).
func (h *Handler) schedules(r *http.Request) (string, any, error) {
	reg := arbiter.NewRegistry(h.cfg.Store)
	reg.Now = h.cfg.Now
	list, err := reg.List(r.Context())
	if err != nil {
		return "", nil, err
	}
	if who := api.IdentityOf(r); !who.SeesAllJobs() {
		for _, sc := range list {
			if sc.Job != nil && sc.Job.User != who.Name {
				sc.Job = nil
			}
		}
	}
	return "", &schedulesData{Schedules: list}, nil
}

// eventsData is the events page: the browser fills the list from the
// event stream, replaying from After.
type eventsData struct {
	After  uint64
	Replay uint64
}

// eventsReplay is how many recent events the events page replays.
const eventsReplay = 100

func (h *Handler) events(r *http.Request) (string, any, error) {
	last := h.cfg.Ctl.Bus().Last()
	return "", &eventsData{After: last - min(last, eventsReplay), Replay: eventsReplay}, nil
}

// auditData is the audit page.
type auditData struct {
	Records []auditRow
	Path    string
	Error   string
}

type auditRow struct {
	audit.Record
	Fields string // "k=v k=v", by key
	Bad    string // the line when it is not a record
}

// auditTail is how many records the audit page shows.
const auditTail = 200

// audit shows the newest records of the audit log, newest first (admins
// only). A log that cannot be read is said on the page, not an error.
func (h *Handler) audit(r *http.Request) (string, any, error) {
	d := &auditData{Path: h.cfg.AuditPath}
	if d.Path == "" {
		d.Error = "this server keeps no audit log"
		return "", d, nil
	}
	lines, err := audit.Tail(d.Path, auditTail)
	if err != nil {
		d.Error = err.Error()
		return "", d, nil
	}
	for i := len(lines) - 1; i >= 0; i-- {
		var row auditRow
		if err := json.Unmarshal(lines[i], &row.Record); err != nil {
			row.Bad = string(lines[i])
		} else {
			keys := make([]string, 0, len(row.Record.Fields))
			for k := range row.Record.Fields {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for i, k := range keys {
				if i > 0 {
					row.Fields += " "
				}
				row.Fields += fmt.Sprintf("%s=%s", k, row.Record.Fields[k])
			}
		}
		d.Records = append(d.Records, row)
	}
	return "", d, nil
}
