package api_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/api/apitest"
	"github.com/berth-dev/berth/arbiter"
	"github.com/berth-dev/berth/auth"
)

// answer is one response: status, headers and the body's JSON object.
type answer struct {
	status int
	header http.Header
	body   []byte
	fields map[string]json.RawMessage
}

// call sends method path with body (none when "") and headers, with the
// server's token, and returns the answer, requiring a JSON object.
func (s *server) call(method, path, body string, headers ...string) answer {
	s.t.Helper()
	hdr := http.Header{}
	if s.token != "" {
		hdr.Set("Authorization", "Bearer "+s.token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		hdr.Set(headers[i], headers[i+1])
	}
	resp, data := s.send(method, path, body, hdr)
	a := answer{status: resp.StatusCode, header: resp.Header, body: data}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		s.t.Fatalf("%s %s: Content-Type %q: %s", method, path, ct, data)
	}
	if err := json.Unmarshal(data, &a.fields); err != nil {
		s.t.Fatalf("%s %s: answer %s is not a JSON object: %v", method, path, data, err)
	}
	return a
}

// keys returns the answer's top-level fields, sorted.
func (a answer) keys() []string { return slices.Sorted(maps.Keys(a.fields)) }

// str returns the string field name.
func (a answer) str(name string) string {
	var v string
	_ = json.Unmarshal(a.fields[name], &v)
	return v
}

// errorBody returns the answer's error object.
func (a answer) errorBody() berth.Error {
	var e berth.Error
	_ = json.Unmarshal(a.fields["error"], &e)
	return e
}

var (
	hexToken  = regexp.MustCompile(`^[0-9a-f]{64}$`)
	sparkTime = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00$`)
)

func sortedKeys(names ...string) []string { slices.Sort(names); return names }

func TestSwapLockAPI(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	held := func(a answer) berth.SwapLockState {
		t.Helper()
		var st berth.SwapLockState
		if err := json.Unmarshal(a.body, &st); err != nil {
			t.Fatalf("lock state %s: %v", a.body, err)
		}
		return st
	}

	// No lock: exactly {"held": false}.
	a := s.call("GET", "/api/swap/lock", "")
	if a.status != 200 || strings.TrimSpace(string(a.body)) != `{"held":false}` {
		t.Fatalf("GET of no lock: %d %s", a.status, a.body)
	}

	// Acquire: the seed's answer, with the token.
	a = s.call("POST", "/api/swap/lock", `{"holder":"openclaw-daily-vol","ttl_seconds":900,"note":"daily vol run"}`)
	if a.status != 200 {
		t.Fatalf("acquire: %d %s", a.status, a.body)
	}
	if got, want := a.keys(), sortedKeys("held", "holder", "acquired_at", "expires_at", "seconds_remaining", "note", "token"); !slices.Equal(got, want) {
		t.Errorf("acquire answer fields %v, want %v", got, want)
	}
	token := a.str("token")
	st := held(a)
	if !hexToken.MatchString(token) || !st.Held || st.Holder != "openclaw-daily-vol" || st.Note != "daily vol run" ||
		st.SecondsRemaining != 900 || !sparkTime.MatchString(a.str("acquired_at")) || !sparkTime.MatchString(a.str("expires_at")) ||
		st.ExpiresAt.Sub(st.AcquiredAt) != 900*time.Second {
		t.Errorf("acquire answer %s", a.body)
	}

	// Status: never the token, nor acquired_at.
	a = s.call("GET", "/api/swap/lock", "")
	if got, want := a.keys(), sortedKeys("held", "holder", "expires_at", "seconds_remaining", "note"); a.status != 200 || !slices.Equal(got, want) {
		t.Errorf("GET of a held lock: %d %s, want fields %v", a.status, a.body, want)
	}

	// 409 for another holder, with the lock's state (no token).
	a = s.call("POST", "/api/swap/lock", `{"holder":"dashboard"}`)
	if a.status != http.StatusConflict || a.str("holder") != "openclaw-daily-vol" || string(a.fields["held"]) != "true" ||
		a.fields["token"] != nil || a.errorBody().Code != berth.ECodeConflict || a.fields["expires_at"] == nil {
		t.Errorf("acquire by another holder: %d %s", a.status, a.body)
	}

	// The same holder: 403 without its token or with a wrong one; with it
	// (header, query or body), the token is kept.
	for _, tc := range []struct {
		name    string
		path    string
		body    string
		headers []string
		status  int
	}{
		{"no token", "/api/swap/lock", `{"holder":"openclaw-daily-vol"}`, nil, 403},
		{"wrong header", "/api/swap/lock", `{"holder":"openclaw-daily-vol"}`, []string{"X-Swap-Lock-Token", arbiter.NewToken()}, 403},
		{"wrong query", "/api/swap/lock?token=nope", `{"holder":"openclaw-daily-vol"}`, nil, 403},
		{"header", "/api/swap/lock", `{"holder":"openclaw-daily-vol","ttl_seconds":60}`, []string{"X-Swap-Lock-Token", token}, 200},
		{"query", "/api/swap/lock?token=" + token, `{"holder":"openclaw-daily-vol","ttl_seconds":120}`, nil, 200},
		{"body", "/api/swap/lock", `{"holder":"openclaw-daily-vol","ttl_seconds":180,"token":"` + token + `"}`, nil, 200},
		{"header wins over query", "/api/swap/lock?token=nope", `{"holder":"openclaw-daily-vol","ttl_seconds":240}`,
			[]string{"X-Swap-Lock-Token", token}, 200},
	} {
		a := s.call("POST", tc.path, tc.body, tc.headers...)
		if a.status != tc.status {
			t.Errorf("extend, %s: %d %s, want %d", tc.name, a.status, a.body, tc.status)
			continue
		}
		if tc.status == 403 && (a.errorBody().Code != berth.ECodeForbidden || a.errorBody().Field != "token") {
			t.Errorf("extend, %s: error %s, want forbidden naming token", tc.name, a.body)
		}
		if tc.status == 200 {
			if a.str("token") != token {
				t.Errorf("extend, %s: token changed", tc.name)
			}
			if st := held(a); st.Note != "daily vol run" || st.SecondsRemaining < 59 || st.SecondsRemaining > 240 {
				t.Errorf("extend, %s: %s", tc.name, a.body)
			}
		}
	}

	// 423 is what the swap path gets from the lock's Check.
	lock := arbiter.NewLock(s.st)
	err := lock.Check(t.Context(), "")
	if code := berth.ErrorCode(err); code != berth.ECodeLocked || api.Status(code) != http.StatusLocked {
		t.Errorf("Check without the token: %v, want 423", err)
	}
	if err := lock.Check(t.Context(), token); err != nil {
		t.Errorf("Check with the token: %v", err)
	}

	// Release: 403 without the token or with a wrong one; 200 with it.
	for _, tc := range []struct {
		name    string
		path    string
		headers []string
		status  int
		body    string
	}{
		{"no token", "/api/swap/lock", nil, 403, ""},
		{"wrong header", "/api/swap/lock", []string{"X-Swap-Lock-Token", "nope"}, 403, ""},
		{"wrong query", "/api/swap/lock?token=nope", nil, 403, ""},
		{"bad force", "/api/swap/lock?force=maybe", nil, 400, ""},
		{"force=false is no force", "/api/swap/lock?force=false", nil, 403, ""},
		{"header", "/api/swap/lock", []string{"X-Swap-Lock-Token", token}, 200, `{"held":false,"released":true}`},
		{"again: nothing held", "/api/swap/lock", []string{"X-Swap-Lock-Token", token}, 200, `{"held":false,"released":false}`},
	} {
		a := s.call("DELETE", tc.path, "", tc.headers...)
		if a.status != tc.status || (tc.body != "" && strings.TrimSpace(string(a.body)) != tc.body) {
			t.Errorf("release, %s: %d %s, want %d %s", tc.name, a.status, a.body, tc.status, tc.body)
		}
		if tc.status == 400 && a.errorBody().Field != "force" {
			t.Errorf("release, %s: %s, want field force", tc.name, a.body)
		}
	}

	// ?token= releases; ?force=true releases without a token.
	a = s.call("POST", "/api/swap/lock", `{"holder":"b"}`)
	if a.status != 200 || held(a).SecondsRemaining != 900 {
		t.Fatalf("acquire with the default TTL: %d %s", a.status, a.body)
	}
	if a = s.call("DELETE", "/api/swap/lock?token="+a.str("token"), ""); a.status != 200 || string(a.fields["released"]) != "true" {
		t.Errorf("release with ?token=: %d %s", a.status, a.body)
	}
	s.call("POST", "/api/swap/lock", `{"holder":"c"}`)
	if a = s.call("DELETE", "/api/swap/lock?force=true", ""); a.status != 200 || string(a.fields["released"]) != "true" {
		t.Errorf("forced release: %d %s", a.status, a.body)
	}
	if a = s.call("GET", "/api/swap/lock", ""); string(a.body) != "{\"held\":false}\n" {
		t.Errorf("GET after forced release: %s", a.body)
	}
}

func TestSwapLockAPIInput(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	for _, tc := range []struct {
		body      string
		status    int
		field     string
		remaining int64
	}{
		{`{"holder":"h","ttl_seconds":0}`, 200, "", 1},
		{`{"holder":"h","ttl_seconds":-30}`, 200, "", 1},
		{`{"holder":"h","ttl_seconds":86401}`, 200, "", 86400},
		{`{"holder":"h","ttl_seconds":1e12}`, 200, "", 86400},
		{`{"holder":"h","ttl_seconds":null}`, 200, "", 900},
		{`{"holder":"h","ttl_seconds":30.5}`, 200, "", 31},
		{`{"holder":"h","ttl_seconds":"900"}`, 400, "ttl_seconds", 0},
		{`{"holder":"h","ttl_seconds":true}`, 400, "ttl_seconds", 0},
		{`{"holder":"h","ttl_seconds":[1]}`, 400, "ttl_seconds", 0},
		{`{"ttl_seconds":60}`, 400, "holder", 0},
		{`{"holder":""}`, 400, "holder", 0},
		{`{"holder":7}`, 400, "holder", 0},
		{`{"holder":"h","note":["x"]}`, 400, "note", 0},
		{`{"holder":"h","colour":"red"}`, 400, "colour", 0},
		{`{"holder":`, 400, "body", 0},
		{``, 400, "body", 0},
	} {
		a := s.call("POST", "/api/swap/lock", tc.body)
		if a.status != tc.status {
			t.Errorf("POST %s: %d %s, want %d", tc.body, a.status, a.body, tc.status)
			continue
		}
		if tc.status == 400 {
			if e := a.errorBody(); e.Code != berth.ECodeInvalid || e.Field != tc.field {
				t.Errorf("POST %s: error %s, want invalid naming %s", tc.body, a.body, tc.field)
			}
			continue
		}
		var st berth.SwapLockState
		_ = json.Unmarshal(a.body, &st)
		if st.SecondsRemaining != tc.remaining {
			t.Errorf("POST %s: seconds_remaining %d, want %d", tc.body, st.SecondsRemaining, tc.remaining)
		}
		if a := s.call("DELETE", "/api/swap/lock?force=1", ""); a.status != 200 {
			t.Fatalf("forced release: %d %s", a.status, a.body)
		}
	}
}

// TestSwapLockAPIExpiry stores a lock that has expired (time is faked at
// the store): it is not held, and another holder takes it.
func TestSwapLockAPIExpiry(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	a := s.call("POST", "/api/swap/lock", `{"holder":"a","ttl_seconds":60}`)
	token := a.str("token")
	old := &berth.SwapLock{Holder: "a", Token: token, AcquiredAt: time.Now().Add(-2 * time.Minute), ExpiresAt: time.Now().Add(-time.Minute)}
	if err := s.st.PutSwapLock(t.Context(), old, token); err != nil {
		t.Fatal(err)
	}
	if a = s.call("GET", "/api/swap/lock", ""); strings.TrimSpace(string(a.body)) != `{"held":false}` {
		t.Fatalf("GET of an expired lock: %s", a.body)
	}
	if err := arbiter.NewLock(s.st).Check(t.Context(), ""); err != nil {
		t.Errorf("Check of an expired lock: %v", err)
	}
	a = s.call("POST", "/api/swap/lock", `{"holder":"b"}`)
	if a.status != 200 || a.str("holder") != "b" || a.str("token") == token {
		t.Fatalf("acquire of an expired lock: %d %s", a.status, a.body)
	}
}

func TestScheduleAPI(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	if a := s.call("GET", "/api/schedule", ""); a.status != 200 || strings.TrimSpace(string(a.body)) != `{"schedules":[]}` {
		t.Fatalf("GET of no schedules: %d %s", a.status, a.body)
	}
	body := `{"id":"daily-vol","name":"Daily Vol","owner":"openclaw","cron":"0 6 * * *","next_run":"2026-06-18T06:00:00Z",` +
		`"description":"Swaps to the big model, generates the vol report"}`
	a := s.call("POST", "/api/schedule", body)
	entryKeys := sortedKeys("id", "name", "owner", "cron", "next_run", "description", "registered_at", "updated_at")
	if a.status != 200 || !slices.Equal(a.keys(), entryKeys) || a.str("id") != "daily-vol" || a.str("next_run") != "2026-06-18T06:00:00Z" ||
		!sparkTime.MatchString(a.str("registered_at")) || a.str("registered_at") != a.str("updated_at") {
		t.Fatalf("register: %d %s", a.status, a.body)
	}
	var first berth.Schedule
	_ = json.Unmarshal(a.body, &first)

	gen := s.call("POST", "/api/schedule", `{"name":"ad hoc"}`)
	if gen.status != 200 || arbiter.ValidScheduleID(gen.str("id")) != nil || gen.str("owner") != "" {
		t.Fatalf("register without an id: %d %s", gen.status, gen.body)
	}

	a = s.call("POST", "/api/schedule", `{"id":"daily-vol","name":"Daily Vol v2","cron":"@daily"}`)
	var upd berth.Schedule
	_ = json.Unmarshal(a.body, &upd)
	if a.status != 200 || upd.Name != "Daily Vol v2" || upd.Owner != "" || !upd.RegisteredAt.Equal(first.RegisteredAt) ||
		upd.UpdatedAt.Before(first.UpdatedAt) {
		t.Fatalf("update in place: %d %s (first %+v)", a.status, a.body, first)
	}

	a = s.call("GET", "/api/schedule", "")
	var list berth.ScheduleList
	if err := json.Unmarshal(a.body, &list); err != nil || a.status != 200 || len(list.Schedules) != 2 ||
		list.Schedules[0].ID != "daily-vol" || list.Schedules[1].ID != gen.str("id") {
		t.Fatalf("list: %d %s", a.status, a.body)
	}

	for _, tc := range []struct {
		method, path, body string
		status             int
		field              string
	}{
		{"POST", "/api/schedule", `{"id":"daily vol","name":"x"}`, 400, "id"},
		{"POST", "/api/schedule", `{"id":"` + strings.Repeat("a", 65) + `","name":"x"}`, 400, "id"},
		{"POST", "/api/schedule", `{"id":"x"}`, 400, "name"},
		{"POST", "/api/schedule", `{"id":"x","name":"  "}`, 400, "name"},
		{"POST", "/api/schedule", `{"name":"x","cron":"0 6 * *"}`, 400, "cron"},
		{"POST", "/api/schedule", `{"name":"x","next_run":"soon"}`, 400, "next_run"},
		{"POST", "/api/schedule", `{"name":"x","id":5}`, 400, "id"},
		{"POST", "/api/schedule", `{"name":"x","registered_at":"2026-01-01T00:00:00Z"}`, 400, "registered_at"},
		{"DELETE", "/api/schedule/no-such", "", 404, "id"},
		{"DELETE", "/api/schedule/a%20b", "", 400, "id"},
	} {
		a := s.call(tc.method, tc.path, tc.body)
		if e := a.errorBody(); a.status != tc.status || e.Field != tc.field {
			t.Errorf("%s %s %s: %d %s, want %d naming %s", tc.method, tc.path, tc.body, a.status, a.body, tc.status, tc.field)
		}
	}

	if a = s.call("DELETE", "/api/schedule/daily-vol", ""); a.status != 200 || strings.TrimSpace(string(a.body)) != `{"deleted":true}` {
		t.Fatalf("delete: %d %s", a.status, a.body)
	}
	if a = s.call("DELETE", "/api/schedule/daily-vol", ""); a.status != 404 || a.errorBody().Code != berth.ECodeNotFound {
		t.Fatalf("delete twice: %d %s", a.status, a.body)
	}
	a = s.call("GET", "/api/schedule", "")
	if err := json.Unmarshal(a.body, &list); err != nil || len(list.Schedules) != 1 {
		t.Fatalf("list after delete: %s", a.body)
	}
}

func TestCoordinationRoles(t *testing.T) {
	t.Parallel()
	s := newSecuredServer(t)
	as := func(role auth.Role) *server {
		c := *s
		c.token = apitest.Token(t, s.sec, string(role)+"-1", role, "")
		return &c
	}
	roleOf := map[*server]string{}
	viewer, user, peer, operator := as(auth.RoleViewer), as(auth.RoleUser), as(auth.RolePeer), as(auth.RoleOperator)
	roleOf[viewer], roleOf[user], roleOf[peer], roleOf[operator] = "viewer", "user", "peer", "operator"
	for _, tc := range []struct {
		who          *server
		method, path string
		body         string
		status       int
	}{
		{viewer, "GET", "/api/swap/lock", "", 200},
		{user, "GET", "/api/swap/lock", "", 200},
		{peer, "GET", "/api/swap/lock", "", 200},
		{viewer, "GET", "/api/schedule", "", 200},
		{viewer, "POST", "/api/swap/lock", `{"holder":"v"}`, 403},
		{user, "POST", "/api/swap/lock", `{"holder":"u"}`, 403},
		{user, "DELETE", "/api/swap/lock?force=true", "", 403},
		{user, "POST", "/api/schedule", `{"name":"n"}`, 403},
		{viewer, "DELETE", "/api/schedule/x", "", 403},
		{operator, "POST", "/api/swap/lock", `{"holder":"op"}`, 200},
		{operator, "POST", "/api/schedule", `{"id":"x","name":"n"}`, 200},
		{operator, "DELETE", "/api/schedule/x", "", 200},
		{operator, "DELETE", "/api/swap/lock?force=true", "", 200},
	} {
		a := tc.who.call(tc.method, tc.path, tc.body)
		if a.status != tc.status {
			t.Errorf("%s %s as %s: %d %s, want %d", tc.method, tc.path, roleOf[tc.who], a.status, a.body, tc.status)
		}
	}
	// No token at all: 401.
	anon := *s
	anon.token = ""
	if a := anon.call("GET", "/api/swap/lock", ""); a.status != http.StatusUnauthorized {
		t.Errorf("GET without a token: %d %s", a.status, a.body)
	}
}

func TestScheduleJobAPI(t *testing.T) {
	t.Parallel()
	s := newSecuredServer(t)
	body := `{"id":"nightly","name":"Nightly eval","cron":"0 2 * * *",` +
		`"job":{"name":"eval","command":"python eval.py","resources":{"gpus":1}}}`
	a := s.call("POST", "/api/schedule", body)
	entryKeys := sortedKeys("id", "name", "owner", "cron", "next_run", "description", "registered_at", "updated_at",
		"job", "last_run", "last_job_id")
	if a.status != 200 || !slices.Equal(a.keys(), entryKeys) || a.str("last_run") != "" || a.str("last_job_id") != "" {
		t.Fatalf("register with a job: %d %s", a.status, a.body)
	}
	var got berth.Schedule
	if err := json.Unmarshal(a.body, &got); err != nil {
		t.Fatal(err)
	}
	job := got.Job
	if job == nil || job.Queue != berth.DefaultQueue || job.Kind != berth.KindBatch || job.Priority != berth.DefaultPriority ||
		job.Nodes != 1 || job.Resources.GPUs != 1 || job.User != "root" || strings.Join(job.Command, " ") != "sh -c python eval.py" {
		t.Fatalf("stored job %+v: want the defaults filled in and the caller as its user", job)
	}
	// GET lists it with its job; a display-only entry keeps the seed's keys.
	if a := s.call("POST", "/api/schedule", `{"id":"display","name":"Daily Vol","cron":"0 6 * * *","job":null}`); a.status != 200 ||
		!slices.Equal(a.keys(), sortedKeys("id", "name", "owner", "cron", "next_run", "description", "registered_at", "updated_at")) {
		t.Fatalf("register with a null job: %d %s", a.status, a.body)
	}
	a = s.call("GET", "/api/schedule", "")
	var list struct {
		Schedules []map[string]json.RawMessage `json:"schedules"`
	}
	if err := json.Unmarshal(a.body, &list); err != nil || len(list.Schedules) != 2 ||
		len(list.Schedules[0]) != len(entryKeys) || len(list.Schedules[1]) != 8 {
		t.Fatalf("list: %d %s", a.status, a.body)
	}
	// An operator may schedule a job for another user; a user may not
	// register at all.
	op := *s
	op.token = apitest.Token(t, s.sec, "op-1", auth.RoleOperator, "")
	if a := op.call("POST", "/api/schedule", `{"name":"x","cron":"@daily","job":{"user":"bob","command":"true"}}`); a.status != 200 ||
		!strings.Contains(string(a.fields["job"]), `"user":"bob"`) {
		t.Fatalf("operator scheduling for bob: %d %s", a.status, a.body)
	}
	user := *s
	user.token = apitest.Token(t, s.sec, "user-1", auth.RoleUser, "")
	if a := user.call("POST", "/api/schedule", `{"name":"x","cron":"@daily","job":{"command":"true"}}`); a.status != 403 {
		t.Fatalf("user scheduling a job: %d %s", a.status, a.body)
	}

	for _, tc := range []struct {
		body  string
		field string
	}{
		{`{"name":"x","job":{"command":"true"}}`, "cron"},
		{`{"name":"x","cron":"0 6 * *","job":{"command":"true"}}`, "cron"},
		{`{"name":"x","cron":"@daily","job":{}}`, "job.command"},
		{`{"name":"x","cron":"@daily","job":{"command":""}}`, "job.command"},
		{`{"name":"x","cron":"@daily","job":{"command":"true","queue":"Q Q"}}`, "job.queue"},
		{`{"name":"x","cron":"@daily","job":{"command":"true","priority":"high"}}`, "job.priority"},
		{`{"name":"x","cron":"@daily","job":{"command":"true","resources":{"gpus":-1}}}`, "job.resources.gpus"},
		{`{"name":"x","cron":"@daily","job":{"command":"true","resources":{"gpu_typ":"H100"}}}`, "job.resources.gpu_typ"},
		{`{"name":"x","cron":"@daily","job":{"command":"true","idempotency_key":"k"}}`, "job.idempotency_key"},
		{`{"name":"x","cron":"@daily","job":"true"}`, "job"},
		{`{"name":"x","cron":"@daily","job":{"command":"curl -H {{SECRET:NO_SUCH}}"}}`, "job.command"},
		{`{"name":"x","cron":"@daily","job":{"command":"true","env":{"T":"{{SECRET:NO_SUCH}}"}}}`, "job.env.T"},
	} {
		a := s.call("POST", "/api/schedule", tc.body)
		if e := a.errorBody(); a.status != 400 || e.Field != tc.field {
			t.Errorf("POST %s: %d %s, want 400 naming %s", tc.body, a.status, a.body, tc.field)
		}
	}
	a = s.call("GET", "/api/schedule", "")
	if err := json.Unmarshal(a.body, &list); err != nil || len(list.Schedules) != 3 {
		t.Fatalf("refused requests registered: %s", a.body)
	}
}

// TestScheduleJobSpecsAreTheirUsers checks that a user listing the
// schedule registry sees every entry but only its own entries' job specs.
func TestScheduleJobSpecsAreTheirUsers(t *testing.T) {
	t.Parallel()
	s := newSecuredServer(t)
	for _, body := range []string{
		`{"id":"bobs","name":"Bob's","cron":"0 6 * * *","job":{"user":"bob","command":["echo","TOKEN=hunter2"]}}`,
		`{"id":"alices","name":"Alice's","cron":"0 7 * * *","job":{"user":"alice","command":["true"]}}`,
	} {
		if a := s.call("POST", "/api/schedule", body); a.status != http.StatusOK {
			t.Fatalf("register %s: %d %s", body, a.status, a.body)
		}
	}
	alice := apitest.Token(t, s.sec, "alice", auth.RoleUser, "")
	status, _, data := s.doAuth("GET", "/api/schedule", "", alice)
	var list berth.ScheduleList
	if status != http.StatusOK || json.Unmarshal(data, &list) != nil || len(list.Schedules) != 2 {
		t.Fatalf("alice lists schedules: %d %s", status, data)
	}
	for _, sc := range list.Schedules {
		if (sc.Job != nil) != (sc.ID == "alices") {
			t.Errorf("alice sees entry %s with job %+v; want only her own entry's job", sc.ID, sc.Job)
		}
	}
	if strings.Contains(string(data), "hunter2") {
		t.Errorf("alice's listing holds bob's job spec: %s", data)
	}
}
