package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/store"
)

// Execution backends (docs/kubernetes.md): admins add and remove the
// backends attempts run on besides the agent pool (Kubernetes clusters);
// anyone who may list workers lists them, with their status. A backend is
// stored before it is added to the controller, and its credentials (a
// kubeconfig) are sealed before they are stored and never answered; every
// change is audited without them.

// BackendRegistry is the controller's registry of running backends;
// *controller.Controller is one.
type BackendRegistry interface {
	// AddBackend builds spec's backend and adds it (spec carries its
	// plain credentials); an error adds nothing.
	AddBackend(ctx context.Context, spec berth.BackendSpec) error
	// RemoveBackend closes backend name and removes it.
	RemoveBackend(ctx context.Context, name string) error
	// BackendStatuses returns every running backend's status, the agent
	// pool's first.
	BackendStatuses() []berth.BackendStatus
	// BackendAttempts returns how many active attempts are held on
	// backend name's workers.
	BackendAttempts(ctx context.Context, name string) (int, error)
}

// BackendKeys seals and opens a backend's credentials; auth.Vault is one.
type BackendKeys interface {
	SealBackendCredentials(backend, creds string) ([]byte, error)
	OpenBackendCredentials(backend string, sealed []byte) (string, error)
}

// Backends is what the backend endpoints work with: the store, the keys
// and the controller's registry.
type Backends struct {
	Store    store.BackendStore
	Keys     BackendKeys
	Registry BackendRegistry
	// Now stamps created_at; time.Now when nil.
	Now func() time.Time
	// Log gets the backends Load could not start; nil: discarded.
	Log *slog.Logger

	mu sync.Mutex // one add or remove at a time, store and registry together
	// failed holds why a stored backend is not running (Load could not
	// start it), by name, for its status.
	failed map[string]string
}

func (b *Backends) now() time.Time {
	if b.Now != nil {
		return b.Now().UTC()
	}
	return time.Now().UTC()
}

// credentials returns the plain credentials spec carries, for sealing.
func credentials(spec *berth.BackendSpec) string {
	if spec.Kubernetes != nil {
		return spec.Kubernetes.Kubeconfig
	}
	return ""
}

// withCredentials returns a copy of spec carrying creds in plain text,
// for the registry.
func withCredentials(spec *berth.BackendSpec, creds string) berth.BackendSpec {
	out := *spec
	if spec.Kubernetes != nil {
		k := *spec.Kubernetes
		k.Kubeconfig = creds
		out.Kubernetes = &k
	}
	return out
}

// redacted returns a copy of spec without credentials, plain or sealed,
// as answered.
func redacted(spec *berth.BackendSpec) *berth.BackendSpec {
	out := withCredentials(spec, "")
	out.SealedCredentials = nil
	return &out
}

// Load adds every stored backend to the registry, as the server starts.
// A backend that does not start (its kind unknown to this server, its
// credentials not opening, its factory refusing it) is logged and listed
// with state failed and why; the others start regardless. Only the
// store's error is returned.
func (b *Backends) Load(ctx context.Context) error {
	specs, err := b.Store.Backends(ctx)
	if err != nil {
		return fmt.Errorf("load backends: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, spec := range specs {
		creds, err := b.Keys.OpenBackendCredentials(spec.Name, spec.SealedCredentials)
		if err == nil {
			err = b.Registry.AddBackend(ctx, withCredentials(spec, creds))
		}
		if err != nil {
			if b.failed == nil {
				b.failed = map[string]string{}
			}
			b.failed[spec.Name] = err.Error()
			if b.Log != nil {
				b.Log.Warn("backend not started", "backend", spec.Name, "kind", spec.Kind, "err", err)
			}
		}
	}
	return nil
}

// backendRoutes registers the backend endpoints.
func (s *Server) backendRoutes() {
	on := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if s.Backends == nil {
				writeError(w, r, berth.Errorf(berth.ECodeNotFound, "execution backends are not enabled on this server"))
				return
			}
			h(w, r)
		}
	}
	s.route("GET /api/v1/backends", readsCluster, jobReader, on(s.listBackends))
	s.route("GET /api/v1/backends/{name}", readsCluster, jobReader, on(s.getBackend))
	s.route("POST /api/v1/backends", auth.Identity.IsAdmin, "admin", on(s.addBackend))
	s.route("DELETE /api/v1/backends/{name}", auth.Identity.IsAdmin, "admin", on(s.removeBackend))
}

// list returns every backend: the registry's running ones (the agent pool
// first) with the stored specs, then those stored that are not running.
func (b *Backends) list(ctx context.Context) ([]berth.BackendInfo, error) {
	specs, err := b.Store.Backends(ctx)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]*berth.BackendSpec, len(specs))
	for _, sp := range specs {
		byName[sp.Name] = sp
	}
	var out []berth.BackendInfo
	for _, st := range b.Registry.BackendStatuses() {
		info := berth.BackendInfo{Status: st}
		if sp := byName[st.Name]; sp != nil {
			info.Spec = redacted(sp)
			delete(byName, st.Name)
		}
		out = append(out, info)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		sp := byName[name]
		msg := b.failed[name]
		if msg == "" {
			msg = "stored but not running on this server"
		}
		out = append(out, berth.BackendInfo{Spec: redacted(sp),
			Status: berth.BackendStatus{Name: name, Kind: sp.Kind, State: berth.BackendFailed, Message: msg}})
	}
	return out, nil
}

// listBackends answers GET /api/v1/backends: {"backends":[...]}, the
// agent pool first, then the others by name, each with its spec (no
// credentials) and status.
func (s *Server) listBackends(w http.ResponseWriter, r *http.Request) {
	list, err := s.Backends.list(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, berth.BackendList{Backends: list})
}

// getBackend answers GET /api/v1/backends/{name}: one backend, or 404.
func (s *Server) getBackend(w http.ResponseWriter, r *http.Request) {
	info, err := s.Backends.find(r.Context(), r.PathValue("name"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// find returns backend name as listed, or a not-found error.
func (b *Backends) find(ctx context.Context, name string) (*berth.BackendInfo, error) {
	list, err := b.list(ctx)
	if err != nil {
		return nil, err
	}
	for i := range list {
		if list[i].Status.Name == name {
			return &list[i], nil
		}
	}
	return nil, &berth.Error{Code: berth.ECodeNotFound, Field: "name", Message: "no backend " + name + " (berth backends lists them)"}
}

// addBackend answers POST /api/v1/backends: it validates the
// berth.BackendSpec in the body (created_at is the server's), seals its
// credentials, stores it, then adds it to the controller; when the
// controller refuses it (an unknown kind, a kubeconfig it cannot use) the
// stored row is deleted and the error, naming the field, is the answer.
// Bad input is 400 naming the field and nothing is stored; a name in use
// is 409. It answers 201 with the backend as listed, without credentials.
func (s *Server) addBackend(w http.ResponseWriter, r *http.Request) {
	var in berth.BackendSpec
	if err := decode(r, &in); err != nil {
		writeError(w, r, err)
		return
	}
	in.SetDefaults()
	if err := in.Validate(); err != nil {
		writeError(w, r, err)
		return
	}
	b := s.Backends
	info, err := b.add(r.Context(), &in, func(action string, fields map[string]string) error {
		return s.sec.record(r, action, "backend/"+in.Name, fields)
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, info)
}

// add seals spec's credentials, records it (audit: backend.added), stores
// it and adds it to the registry, undoing the store's row when the
// registry refuses it (audit: backend.refused, with why).
func (b *Backends) add(ctx context.Context, spec *berth.BackendSpec, record func(action string, fields map[string]string) error) (*berth.BackendInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if st := b.status(spec.Name); st != nil {
		return nil, &berth.Error{Code: berth.ECodeConflict, Field: "name", Message: fmt.Sprintf("backend %s exists (berth backend rm %s first)", spec.Name, spec.Name)}
	}
	creds := credentials(spec)
	sealed, err := b.Keys.SealBackendCredentials(spec.Name, creds)
	if err != nil {
		return nil, err
	}
	stored := withCredentials(spec, "")
	stored.SealedCredentials, stored.CreatedAt = sealed, b.now()
	if err := record("backend.added", backendFields(spec)); err != nil {
		return nil, err
	}
	if err := b.Store.AddBackend(ctx, &stored); err != nil {
		return nil, err
	}
	if err := b.Registry.AddBackend(ctx, withCredentials(&stored, creds)); err != nil {
		// Not kept: the store holds only backends the controller runs
		// (or ran, before a restart).
		if rerr := b.Store.RemoveBackend(context.WithoutCancel(ctx), spec.Name); rerr != nil {
			return nil, errors.Join(err, fmt.Errorf("and its stored row could not be deleted: %w", rerr))
		}
		if rerr := record("backend.refused", map[string]string{"error": err.Error()}); rerr != nil {
			return nil, errors.Join(err, rerr)
		}
		return nil, err
	}
	delete(b.failed, spec.Name)
	info := &berth.BackendInfo{Spec: redacted(&stored), Status: *b.status(spec.Name)}
	return info, nil
}

// status returns the registry's status of backend name, or nil when it
// runs no backend of that name.
func (b *Backends) status(name string) *berth.BackendStatus {
	for _, st := range b.Registry.BackendStatuses() {
		if st.Name == name {
			return &st
		}
	}
	return nil
}

// backendFields are what the audit log records of spec: its settings,
// never its credentials.
func backendFields(spec *berth.BackendSpec) map[string]string {
	f := map[string]string{"kind": spec.Kind}
	if len(spec.Queues) > 0 {
		f["queues"] = strings.Join(spec.Queues, ",")
	}
	if k := spec.Kubernetes; k != nil {
		f["namespace"], f["placement"] = k.Namespace, k.Placement
		if k.Context != "" {
			f["context"] = k.Context
		}
		if k.ImageDefault != "" {
			f["image_default"] = k.ImageDefault
		}
		for _, key := range slices.Sorted(maps.Keys(k.NodeSelector)) {
			f["node_selector."+key] = k.NodeSelector[key]
		}
	}
	return f
}

// removeBackend answers DELETE /api/v1/backends/{name}: 204; 404 for an
// unknown backend (the agent pool is not removable: 400); 409 while
// attempts run there, unless ?force=true: its workers are then lost, with
// the attempts on them (their jobs retried per their retries). Jobs that
// wait for the backend by name keep waiting. The row is deleted first,
// then the backend stopped.
func (s *Server) removeBackend(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	force, err := boolQuery(r, "force")
	if err == nil && name == berth.BackendAgents {
		err = berth.Invalidf("name", "the agent pool cannot be removed (berth worker drain stops its workers)")
	}
	if err == nil {
		err = s.Backends.remove(r.Context(), name, force, func(fields map[string]string) error {
			return s.sec.record(r, "backend.removed", "backend/"+name, fields)
		})
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// remove deletes backend name from the store and the registry; without
// force it refuses while attempts run there.
func (b *Backends) remove(ctx context.Context, name string, force bool, record func(map[string]string) error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	specs, err := b.Store.Backends(ctx)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(specs, func(sp *berth.BackendSpec) bool { return sp.Name == name })
	st := b.status(name)
	if i < 0 && st == nil {
		return &berth.Error{Code: berth.ECodeNotFound, Field: "name", Message: "no backend " + name + " (berth backends lists them)"}
	}
	fields := map[string]string{}
	if i >= 0 {
		fields = backendFields(specs[i])
	}
	if st != nil {
		// What the controller holds there counts, even when the backend
		// cannot see its pods (unreachable, not synced).
		held, err := b.Registry.BackendAttempts(ctx, name)
		if err != nil {
			return err
		}
		n := max(held, st.Pods)
		if n > 0 && !force {
			return berth.Errorf(berth.ECodeConflict,
				"backend %s runs %s: wait until they end, cancel them, or force (their jobs are then retried elsewhere per their retries)", name, berth.Count(n, "attempt"))
		}
		fields["attempts"] = strconv.Itoa(n)
	}
	if err := record(fields); err != nil {
		return err
	}
	if i >= 0 {
		if err := b.Store.RemoveBackend(ctx, name); err != nil {
			return err
		}
	}
	delete(b.failed, name)
	if st != nil {
		if err := b.Registry.RemoveBackend(context.WithoutCancel(ctx), name); err != nil && berth.ErrorCode(err) != berth.ECodeNotFound {
			return fmt.Errorf("backend %s deleted from the store but still running until the server restarts: %w", name, err)
		}
	}
	return nil
}
