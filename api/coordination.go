package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"github.com/berth-dev/berth/controller"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/arbiter"
)

// Seed 000's coordination endpoints (Spark Control), served unchanged:
// the swap reservation lock (/api/swap/lock) and the schedule registry
// (/api/schedule). Both live in the store, which is the only state, so a
// Lock or Registry made per request sees what every other one (and every
// server sharing the database) wrote. docs/coordination.md describes them.

// swapLock returns the swap lock kept in the store. The swap
// endpoints gate on its Check with the request's swapLockToken.
func (s *Server) swapLock() *arbiter.Lock { return arbiter.NewLock(s.store) }

// scheduleRegistry returns the schedule registry kept in the store.
func (s *Server) scheduleRegistry() *arbiter.Registry { return arbiter.NewRegistry(s.store) }

// swapLockToken returns the swap lock token r carries: the
// X-Swap-Lock-Token header, else the token query parameter, else "".
func swapLockToken(r *http.Request) string {
	if t := r.Header.Get(berth.SwapLockTokenHeader); t != "" {
		return t
	}
	return r.URL.Query().Get("token")
}

// swapLockBody is the body of POST /api/swap/lock as received (see
// berth.SwapLockRequest): ttl_seconds is checked by hand, so that null
// means the default and a wrong type gets a message saying what it takes.
type swapLockBody struct {
	Holder     string          `json:"holder"`
	TTLSeconds json.RawMessage `json:"ttl_seconds"`
	Note       string          `json:"note"`
	Token      string          `json:"token"`
}

// ttl returns the lock's time to live: DefaultSwapLockTTL when ttl_seconds
// is absent or null, else the number clamped to [1, 86400] seconds; any
// other JSON value is ECodeInvalid for field ttl_seconds.
func (b *swapLockBody) ttl() (time.Duration, error) {
	raw := bytes.TrimSpace(b.TTLSeconds)
	if len(raw) == 0 || string(raw) == "null" {
		return berth.DefaultSwapLockTTL, nil
	}
	var secs float64
	if json.Unmarshal(raw, &secs) != nil {
		return 0, berth.Invalidf("ttl_seconds", "must be a number of seconds (clamped to 1–86400), not %s", raw)
	}
	secs = min(max(secs, berth.MinSwapLockTTL.Seconds()), berth.MaxSwapLockTTL.Seconds())
	return berth.ClampSwapLockTTL(time.Duration(secs * float64(time.Second))), nil
}

// getSwapLock answers GET /api/swap/lock: {held:false} or the holder,
// expiry, seconds remaining and note, never the token.
func (s *Server) getSwapLock(w http.ResponseWriter, r *http.Request) {
	st, err := s.swapLock().Status(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// acquireSwapLock answers POST /api/swap/lock: 200 with the lock and its
// token; 409 with the current lock state (and the error) when another
// holder holds it; 403 when the same holder comes without its token (in
// X-Swap-Lock-Token, ?token= or the body's token) or with a wrong one; 400
// for bad input.
func (s *Server) acquireSwapLock(w http.ResponseWriter, r *http.Request) {
	var body swapLockBody
	if err := decode(r, &body); err != nil {
		writeError(w, r, err)
		return
	}
	ttl, err := body.ttl()
	if err != nil {
		writeError(w, r, err)
		return
	}
	token := swapLockToken(r)
	if token == "" {
		token = body.Token
	}
	if err := s.sec.record(r, "swap_lock.acquire", "swap_lock", map[string]string{"holder": body.Holder,
		"note": body.Note, "ttl": ttl.String()}); err != nil {
		writeError(w, r, err)
		return
	}
	st, err := s.swapLock().Acquire(r.Context(), body.Holder, body.Note, ttl, token)
	if berth.ErrorCode(err) == berth.ECodeConflict && st.Held {
		writeHeld(w, st, err)
		return
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// writeHeld answers 409 with the lock's state at the top level, as the
// seed does, and Berth's error object beside it.
func writeHeld(w http.ResponseWriter, st berth.SwapLockState, err error) {
	var fields map[string]json.RawMessage
	data, _ := json.Marshal(st)
	_ = json.Unmarshal(data, &fields)
	e, _ := err.(*berth.Error)
	fields["error"], _ = json.Marshal(e)
	writeJSON(w, http.StatusConflict, fields)
}

// releaseSwapLock answers DELETE /api/swap/lock: with the lock's token (in
// X-Swap-Lock-Token or ?token=) or ?force=true, 200 {"held":false,
// "released":…}; 403 when the lock is held and the token is missing or
// wrong.
func (s *Server) releaseSwapLock(w http.ResponseWriter, r *http.Request) {
	force, err := boolQuery(r, "force")
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.sec.record(r, "swap_lock.release", "swap_lock", map[string]string{"force": strconv.FormatBool(force)}); err != nil {
		writeError(w, r, err)
		return
	}
	released, err := s.swapLock().Release(r.Context(), swapLockToken(r), force)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, berth.SwapLockRelease{Held: false, Released: released})
}

// listSchedules answers GET /api/schedule: {"schedules":[...]}, oldest
// registration first.
func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request) {
	list, err := s.scheduleRegistry().List(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	// Everyone sees what is scheduled; a job's spec (its command and env)
	// only those who may see that user's jobs.
	if who := identity(r); !who.SeesAllJobs() {
		for _, sc := range list {
			if sc.Job != nil && sc.Job.User != who.Name {
				sc.Job = nil
			}
		}
	}
	writeJSON(w, http.StatusOK, berth.ScheduleList{Schedules: list})
}

// putSchedule answers POST /api/schedule: registers or updates an entry
// and answers 200 with the entry stored; 400 naming the field for bad
// input. An entry's job (Berth's extension) is decoded over
// berth.DefaultJobSpec and checked as POST /api/v1/jobs checks a
// submission: it runs as the caller unless it names its user, the
// secrets it references must exist (400 naming "job." and the field), and
// a job no worker could ever run is refused (409 unsatisfiable) unless it
// has hold_until_fits.
func (s *Server) putSchedule(w http.ResponseWriter, r *http.Request) {
	req, err := decodeScheduleRequest(r)
	if err == nil && req.Job != nil {
		err = jobField(submitter(identity(r), req.Job))
		if err == nil {
			err = jobField(controller.CheckSecrets(&req.Job.JobSpec, s.sec.Secrets))
		}
		if err == nil && req.Job.Validate() == nil { // else Put says what is invalid
			_, err = s.ctl.CheckFits(r.Context(), req.Job)
			err = jobField(err)
		}
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	detail := map[string]string{"name": req.Name, "cron": req.Cron}
	if req.Job != nil {
		detail["job_user"] = req.Job.User
	}
	if err := s.sec.record(r, "schedule.set", "schedule/"+req.ID, detail); err != nil {
		writeError(w, r, err)
		return
	}
	sc, err := s.scheduleRegistry().Put(r.Context(), req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sc)
}

// decodeScheduleRequest reads the body of POST /api/schedule. When it has
// a "job" (not null) the job is decoded over berth.DefaultJobSpec, so that
// what it leaves out has a submission's defaults. Errors are decode's
// (fields inside the job are "job." and the JSON name).
func decodeScheduleRequest(r *http.Request) (berth.ScheduleRequest, error) {
	var req berth.ScheduleRequest
	body, err := readBody(r)
	if err != nil {
		return req, err
	}
	var keys map[string]json.RawMessage
	if json.Unmarshal(body, &keys) == nil { // else decode says what is wrong
		for k, v := range keys {
			// encoding/json matches keys case-insensitively.
			if strings.EqualFold(k, "job") && string(bytes.TrimSpace(v)) != "null" {
				req.Job = &berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
			}
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return req, decode(r, &req)
}

// jobField names the field of a job's *berth.Error as the field of a
// schedule entry's job: "job." and the field. Other errors pass unchanged.
func jobField(err error) error {
	var e *berth.Error
	if errors.As(err, &e) && e.Field != "" {
		return &berth.Error{Code: e.Code, Field: "job." + e.Field, Message: e.Message, Err: e.Err}
	}
	return err
}

// deleteSchedule answers DELETE /api/schedule/{id}: {"deleted":true}, or
// 404 when no entry has that id.
func (s *Server) deleteSchedule(w http.ResponseWriter, r *http.Request) {
	if err := s.sec.record(r, "schedule.deleted", "schedule/"+r.PathValue("id"), nil); err != nil {
		writeError(w, r, err)
		return
	}
	if err := s.scheduleRegistry().Delete(r.Context(), r.PathValue("id")); err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, berth.ScheduleDeleted{Deleted: true})
}
