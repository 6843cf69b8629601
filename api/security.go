package api

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/audit"
	"github.com/berth-dev/berth/auth"
)

// Security is who may reach the API and what each may do there, and where
// tokens, secrets and audit records are kept.
type Security struct {
	// Ingress authenticates each request (default deny).
	Ingress *auth.Ingress
	// Limiter bounds each identity's request rate; nil: no limit.
	Limiter *auth.Limiter
	// Tokens is the token registry (the leader's: it issues and revokes).
	Tokens *auth.Registry
	// Secrets keeps the users' secrets; nil on a standby.
	Secrets *auth.Vault
	// Audit gets a record of every token, secret and agent-join change
	// before it is made; nil: not recorded.
	Audit *audit.Log
}

type identityKey struct{}

// identity returns who makes r, as authenticated by ServeHTTP.
func identity(r *http.Request) auth.Identity {
	id, _ := r.Context().Value(identityKey{}).(auth.Identity)
	return id
}

// IdentityOf returns who makes r, a request the Server admitted (the
// dashboard's pages use it); the zero Identity for any other request.
func IdentityOf(r *http.Request) auth.Identity { return identity(r) }

// LoginPath is the dashboard's sign-in page, served without
// authentication; so are the paths under StaticPath.
const (
	LoginPath  = "/login"
	StaticPath = "/static/"
)

// admit authenticates r, applies the same-origin guard and the identity's
// rate limit, and returns r carrying its identity (and, for the
// controller's events, its name as the actor); or it answers the request
// itself with 401, 403 or 429 and returns nil — for a dashboard page
// (page), an unauthenticated GET is sent to the sign-in page instead.
func (sec *Security) admit(w http.ResponseWriter, r *http.Request, page bool) *http.Request {
	id, err := sec.Ingress.Authenticate(r)
	if err == nil {
		err = auth.SameOrigin(r)
	}
	if err != nil {
		// Refusals count against the client's address, so that guessing
		// tokens is throttled too.
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		if !sec.allow(w, r, "refused:"+host) {
			return nil
		}
		if page && r.Method == http.MethodGet && berth.ErrorCode(err) == berth.ECodeUnauthorized {
			http.Redirect(w, r, LoginPath+"?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return nil
		}
		writeError(w, r, err)
		return nil
	}
	if !sec.allow(w, r, id.Via+":"+id.Name) {
		return nil
	}
	ctx := context.WithValue(r.Context(), identityKey{}, id)
	return r.WithContext(berth.WithActor(ctx, id.Name))
}

// allow takes one request from key's rate limit; past it, it answers 429
// with Retry-After and returns false.
func (sec *Security) allow(w http.ResponseWriter, r *http.Request, key string) bool {
	if sec.Limiter == nil {
		return true
	}
	ok, after := sec.Limiter.Allow(key)
	if !ok {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(after.Seconds()+0.999))))
		writeError(w, r, berth.Errorf(berth.ECodeTooMany, "rate limit exceeded; retry after %v", after.Round(time.Millisecond)))
	}
	return ok
}

// The roles' rights. People (viewer, user, operator, admin) and peers read
// the cluster (workers, quotas, worker controls); viewers, operators and
// admins read every job, the metrics (which sum every user's jobs) and
// every event, users only their own jobs and events; users, operators and
// admins submit, and manage their own secrets; operators and admins act
// on every job, worker and quota; admins manage tokens and every user's
// secrets and may speak the agent protocol for any host (local agents
// under loopback trust); an agent credential speaks it for its own host
// only, and a join token only joins. A peer (another cluster's
// credential) alone calls the federation's endpoints, and reads (a job,
// its logs) the jobs it handed over, nothing else: no listing, no
// submission, no secrets.

func readsJobs(id auth.Identity) bool { return id.SeesAllJobs() || id.CanSubmit() }

// readsReceived reports whether id may read a job (GET, logs): those who
// read jobs, and a peer, the jobs it handed over (checkOwner).
func readsReceived(id auth.Identity) bool { return readsJobs(id) || isPeer(id) }

func readsCluster(id auth.Identity) bool { return id.IsPerson() || id.Role == auth.RolePeer }

func isJoinToken(id auth.Identity) bool { return id.Role == auth.RoleAgent && id.Worker == "" }

func speaksAgent(id auth.Identity) bool {
	return (id.Role == auth.RoleAgent && id.Worker != "") || id.Role == auth.RoleAdmin
}

// route registers h for pattern, for identities allow admits; others get
// 403 saying who may (need).
func (s *Server) route(pattern string, allow func(auth.Identity) bool, need string, h http.HandlerFunc) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if id := identity(r); !allow(id) {
			writeError(w, r, berth.Errorf(berth.ECodeForbidden, "%s (role %s) may not %s %s: that needs %s",
				id.Name, id.Role, r.Method, r.URL.Path, need))
			return
		}
		h(w, r)
	})
}

// checkOwner refuses, with 403, an identity that may see or act on its own
// jobs only (mayAll false) when job j is another user's.
func checkOwner(id auth.Identity, j *berth.Job, mayAll bool) error {
	if isPeer(id) { // its own are those it handed over, whoever they run as
		if j.Origin != nil && j.Origin.Cluster == id.Name {
			return nil
		}
		return berth.Errorf(berth.ECodeForbidden, "job %s was not handed over by %s (role peer): a peer sees only the jobs it handed over",
			j.ID, id.Name)
	}
	if mayAll || j.User == id.Name {
		return nil
	}
	return berth.Errorf(berth.ECodeForbidden, "job %s belongs to another user; %s (role %s) may only see and act on its own jobs",
		j.ID, id.Name, id.Role)
}

// ownJob reads job id and checks that the request's identity may see it
// (act is false) or act on it (act is true).
func (s *Server) ownJob(r *http.Request, id string, act bool) (*berth.JobDetail, error) {
	j, err := s.reads.Job(r.Context(), id)
	if err != nil {
		return nil, err
	}
	who := identity(r)
	mayAll := who.SeesAllJobs()
	if act {
		mayAll = who.ActsOnAllJobs()
	}
	if err := checkOwner(who, j.Job, mayAll); err != nil {
		return nil, err
	}
	return j, nil
}

// record appends one audit record of a change the request makes, before
// it is made; without an audit log it does nothing.
func (sec *Security) record(r *http.Request, action, target string, fields map[string]string) error {
	if sec.Audit == nil {
		return nil
	}
	id := identity(r)
	return sec.Audit.Append(audit.Entry{Action: action, Actor: id.Name, Role: string(id.Role), Target: target, Fields: fields})
}

// secretOwner returns whose secrets a request names: the identity's own,
// or with ?owner= (or a body's owner) another user's, for admins only.
func secretOwner(r *http.Request, owner string) (string, error) {
	id := identity(r)
	if owner == "" || owner == id.Name {
		return id.Name, nil
	}
	if !id.IsAdmin() {
		return "", berth.Errorf(berth.ECodeForbidden, "%s (role %s) may only manage its own secrets", id.Name, id.Role)
	}
	if !validIdentityName(owner) {
		return "", berth.Invalidf("owner", "%q is not a valid user name", owner)
	}
	return owner, nil
}

// submitter sets who a submission runs as: users submit as
// themselves only; operators and admins may name any user, and default to
// themselves.
func submitter(id auth.Identity, req *berth.SubmitRequest) error {
	if req.User == "" {
		req.User = id.Name
		return nil
	}
	if req.User != id.Name && !id.ActsOnAllJobs() {
		return &berth.Error{Code: berth.ECodeForbidden, Field: "user",
			Message: fmt.Sprintf("%s (role %s) may only submit jobs as itself, not as %s", id.Name, id.Role, req.User)}
	}
	return nil
}

// validIdentityName reports whether name may name an identity (a token's
// subject, a secret's owner): 1–64 letters, digits and ._@-.
func validIdentityName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	return strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._@-", r))
	}) < 0
}
