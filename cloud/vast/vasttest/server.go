// Package vasttest is a fake Vast.ai REST API (v0) for tests and demos:
// offers on machines 1001, 1002, … at rising prices, instances that go
// through Vast's lifecycle ("" → created → loading → running) on a clock
// the test may drive, faults injected per machine, rate limits per
// endpoint, and Vast's quirks: the 401 body, 429 bodies in plain text or
// JSON, {"instances":null} for a gone instance, an idempotent destroy
// answered 404, env as an object or a flag string, the payload limits.
// It records every search, create and destroy it was sent, so that tests
// can assert what a client paid for. A Host (host.go) brings up real
// machines behind running instances; without one they have no sshd.
//
// A Server is an http.Handler serving the API under BasePath:
//
//	srv := vasttest.New(vasttest.Options{Machines: 3})
//	ts := httptest.NewServer(srv)
//	defer srv.Close()
//	client URL: ts.URL + vasttest.BasePath, key vasttest.DefaultAPIKey
package vasttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// BasePath is where the API is served, as on console.vast.ai.
const BasePath = "/api/v0"

// DefaultAPIKey is the key the server accepts when Options.APIKey is empty.
const DefaultAPIKey = "vasttest-key"

// Defaults of Options.
const (
	DefaultMachines  = 4
	DefaultGPUName   = "RTX 4090"
	DefaultBasePrice = 0.30
	// PriceStep is how much dearer each machine is than the one before.
	PriceStep = 0.05
	// FirstMachine is the first machine's id; offer ids are the machine's
	// plus OfferBase, contract (instance) ids start at FirstContract.
	FirstMachine  = 1001
	OfferBase     = 5_000_000
	FirstContract = 8_800_001
)

// Endpoint names an API endpoint, for rate limits.
type Endpoint string

// The endpoints the server serves.
const (
	EndpointSearch  Endpoint = "search"  // POST /bundles/
	EndpointCreate  Endpoint = "create"  // PUT /asks/{id}/
	EndpointShow    Endpoint = "show"    // GET /instances/{id}/
	EndpointList    Endpoint = "list"    // GET /instances/
	EndpointDestroy Endpoint = "destroy" // DELETE /instances/{id}/
	EndpointKeys    Endpoint = "keys"    // GET and POST /ssh/
)

// Options configure a Server. The zero value serves DefaultMachines
// healthy RTX 4090 machines whose instances run at once.
type Options struct {
	APIKey    string // the key accepted; "" is DefaultAPIKey
	Machines  int    // how many machines offer; 0 is DefaultMachines
	GPUName   string // every machine's GPU; "" is DefaultGPUName
	NumGPUs   int    // GPUs per machine; 0 is 1
	BasePrice float64
	// Faults are the machines' faults, by machine id.
	Faults map[int64]Fault
	// Host brings up running instances' machines; nil: none (SSH port 0).
	Host Host
	// RateLimit answers the first n calls to an endpoint with 429 (a
	// rate-limited call changes nothing). Throttle adds more later.
	RateLimit map[Endpoint]int
	// Clock is the time instances age by; nil is time.Now. A test drives
	// lifecycles deterministically with a clock of its own
	// (internal/fakeclock's Now).
	Clock func() time.Time
	// Stage is how long each boot stage lasts (provisioning, created,
	// loading): an instance is running 3×Stage after its create. 0: it
	// is running when first shown.
	Stage time.Duration
	// VanishAfter is how long an instance of a vanish machine stays
	// running before it disappears; 0: it is shown running once, then
	// it is gone.
	VanishAfter time.Duration
}

// Offer is a machine's offer as the server lists it (the JSON of Vast's
// bundles).
type Offer struct {
	ID            int64   `json:"id"`
	AskContractID int64   `json:"ask_contract_id"`
	MachineID     int64   `json:"machine_id"`
	HostID        int64   `json:"host_id"`
	GPUName       string  `json:"gpu_name"`
	NumGPUs       int     `json:"num_gpus"`
	GPURAM        int     `json:"gpu_ram"`
	GPUTotalRAM   int     `json:"gpu_total_ram"`
	CPUCores      float64 `json:"cpu_cores_effective"`
	CPURAM        int     `json:"cpu_ram"`
	DiskSpace     float64 `json:"disk_space"`
	CUDAMaxGood   float64 `json:"cuda_max_good"`
	DriverVersion string  `json:"driver_version"`
	ComputeCap    int     `json:"compute_cap"`
	DPHBase       float64 `json:"dph_base"`
	DPHTotal      float64 `json:"dph_total"`
	MinBid        float64 `json:"min_bid"`
	Reliability   float64 `json:"reliability2"`
	Score         float64 `json:"score"`
	Verification  string  `json:"verification"`
	Verified      bool    `json:"verified"`
	Rentable      bool    `json:"rentable"`
	Rented        bool    `json:"rented"`
	External      bool    `json:"external"`
	DirectPorts   int     `json:"direct_port_count"`
	InetDown      float64 `json:"inet_down"`
	InetUp        float64 `json:"inet_up"`
	Geolocation   string  `json:"geolocation"`
	PublicIP      string  `json:"public_ipaddr"`
}

// CreatePayload is a create's body as the server decoded it. Env is the
// environment and docker flags whichever form they came in (an object, or
// a flag string "-e K=V -p 8000:8000", whose flags become keys valued "1").
type CreatePayload struct {
	ClientID      string            `json:"client_id"`
	Image         string            `json:"image"`
	Label         string            `json:"label"`
	Disk          float64           `json:"disk"`
	Runtype       string            `json:"runtype"`
	Env           map[string]string `json:"-"`
	Onstart       string            `json:"onstart"`
	Args          []string          `json:"args"`
	ArgsStr       string            `json:"args_str"`
	CancelUnavail bool              `json:"cancel_unavail"`
	Price         *float64          `json:"price"`
}

// Call is one create or destroy the server was sent, whatever it
// answered. Contract is the instance a create made (0: none); for a
// destroy, the instance named.
type Call struct {
	Endpoint Endpoint
	Offer    int64 // create: the offer asked for
	Contract int64
	Status   int
	Body     []byte // as sent
	Payload  *CreatePayload
	At       time.Time
}

// Instance is an instance as the server holds it.
type Instance struct {
	ID       int64
	Machine  int64
	Offer    int64
	Fault    Fault
	Payload  CreatePayload
	Created  time.Time
	Status   string // actual_status as last shown
	SSHPort  int    // the Host's, once running
	Live     bool   // billed: neither destroyed nor vanished
	Vanished bool
	Ended    time.Time
}

// rental is an Instance with the server's bookkeeping.
type rental struct {
	Instance
	price         float64
	started       bool     // the Host was asked to start it
	keys          []string // the account's keys at its create
	runningSince  time.Time
	shownRunning  bool
	statusMsg     string
	intended, cur string
}

// Server is the fake API. It is safe for concurrent use.
type Server struct {
	opts   Options
	mux    *http.ServeMux
	mu     sync.Mutex
	offers []*Offer // by machine, in order
	insts  map[int64]*rental
	next   int64
	keys   []string
	limits map[Endpoint]int
	n429   int
	outage int // the status every call is answered with (OutageDrop: none); 0: no outage
	nOut   int // calls an outage answered
	calls  []Call
	search [][]byte
}

// New returns a server offering opts.Machines machines.
func New(opts Options) *Server {
	if opts.APIKey == "" {
		opts.APIKey = DefaultAPIKey
	}
	if opts.Machines == 0 {
		opts.Machines = DefaultMachines
	}
	if opts.GPUName == "" {
		opts.GPUName = DefaultGPUName
	}
	if opts.NumGPUs == 0 {
		opts.NumGPUs = 1
	}
	if opts.BasePrice == 0 {
		opts.BasePrice = DefaultBasePrice
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	s := &Server{opts: opts, insts: map[int64]*rental{}, next: FirstContract, limits: map[Endpoint]int{}}
	for e, n := range opts.RateLimit {
		s.limits[e] = n
	}
	for i := range opts.Machines {
		m := int64(FirstMachine + i)
		price := math.Round((opts.BasePrice+PriceStep*float64(i))*1000) / 1000
		s.offers = append(s.offers, &Offer{
			ID: OfferBase + m, AskContractID: OfferBase + m, MachineID: m, HostID: 20000 + m,
			GPUName: opts.GPUName, NumGPUs: opts.NumGPUs, GPURAM: 24564, GPUTotalRAM: 24564 * opts.NumGPUs,
			CPUCores: 8, CPURAM: 65536, DiskSpace: 512, CUDAMaxGood: 12.8, DriverVersion: "570.86.10",
			ComputeCap: 890, DPHBase: math.Round(price*950) / 1000, DPHTotal: price, MinBid: math.Round(price*333) / 1000,
			Reliability: 0.995 - 0.001*float64(i), Score: 300 - float64(i), Verification: "verified",
			Verified: true, Rentable: true, DirectPorts: 40, InetDown: 950, InetUp: 800,
			Geolocation: "Loopback, ZZ", PublicIP: "127.0.0.1",
		})
	}
	s.mux = http.NewServeMux()
	s.route("POST /bundles/", EndpointSearch, s.searchOffers)
	s.route("PUT /asks/{id}/", EndpointCreate, s.create)
	s.route("GET /instances/{$}", EndpointList, s.list)
	s.route("GET /instances/{id}/", EndpointShow, s.show)
	s.route("DELETE /instances/{id}/", EndpointDestroy, s.destroy)
	s.route("GET /ssh/", EndpointKeys, s.listKeys)
	s.route("POST /ssh/", EndpointKeys, s.addKey)
	return s
}

// ServeHTTP serves the API under BasePath.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Close stops every live instance's machine on the Host.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, in := range s.insts {
		s.stopHost(in)
	}
}

// Throttle answers the next n calls to e with 429.
func (s *Server) Throttle(e Endpoint, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits[e] += n
}

// OutageDrop, given to Outage, makes every call's connection close
// without an answer (the client sees EOF or a reset, as when the API is
// unreachable).
const OutageDrop = -1

// Outage makes the API answer every call, whatever its endpoint or key,
// with status (a 5xx: the provider's API is down), or close the
// connection unanswered (OutageDrop), until Outage(0) ends it. A call
// during an outage changes nothing and is not recorded.
func (s *Server) Outage(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outage = status
}

// OutageCalls returns how many calls outages have answered (or dropped)
// so far, so that a test can wait for a client to have met one.
func (s *Server) OutageCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nOut
}

// Calls returns every create and destroy the server was sent, in order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// Searches returns the bodies of every search, in order.
func (s *Server) Searches() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.search)
}

// Instances returns every instance the server made, ended ones too, by id.
func (s *Server) Instances() []Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Instance
	for _, in := range s.insts {
		out = append(out, in.Instance)
	}
	slices.SortFunc(out, func(a, b Instance) int { return int(a.ID - b.ID) })
	return out
}

// Live returns the instances still billed.
func (s *Server) Live() []Instance {
	var out []Instance
	for _, in := range s.Instances() {
		if in.Live {
			out = append(out, in)
		}
	}
	return out
}

// Keys returns the account's SSH public keys.
func (s *Server) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.keys)
}

// Vanish makes instance id disappear now, as a host gone offline does:
// it is no longer shown, listed or billed, and its machine is stopped.
func (s *Server) Vanish(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in := s.insts[id]; in != nil && in.Live {
		s.end(in, true)
	}
}

// exchange is one request as a handler sees it and what it answers.
type exchange struct {
	r        *http.Request
	body     []byte
	status   int
	resp     any
	offer    int64
	contract int64
	payload  *CreatePayload
}

func (x *exchange) answer(status int, resp any) {
	x.status, x.resp = status, resp
}

// fail answers Vast's error shape.
func (x *exchange) fail(status int, code, msg string) {
	x.answer(status, map[string]any{"success": false, "error": code, "msg": msg})
}

// route serves pattern under BasePath: the key is checked, then the rate
// limit, then h runs under the server's lock. Creates and destroys are
// recorded whatever they answer.
func (s *Server) route(pattern string, e Endpoint, h func(*exchange)) {
	method, path, _ := strings.Cut(pattern, " ")
	s.mux.HandleFunc(method+" "+BasePath+path, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		x := &exchange{r: r, body: body}
		s.mu.Lock()
		outage := s.outage
		if outage == 0 {
			s.serve(e, h, x)
		} else {
			s.nOut++
		}
		s.mu.Unlock()
		switch {
		case outage == OutageDrop:
			panic(http.ErrAbortHandler) // net/http closes the connection unanswered
		case outage != 0:
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(outage)
			io.WriteString(w, "<html><body><h1>"+strconv.Itoa(outage)+" "+http.StatusText(outage)+"</h1></body></html>")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if text, ok := x.resp.(string); ok {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(x.status)
			io.WriteString(w, text)
			return
		}
		w.WriteHeader(x.status)
		json.NewEncoder(w).Encode(x.resp)
	})
}

// serve runs h on x, under s.mu.
func (s *Server) serve(e Endpoint, h func(*exchange), x *exchange) {
	switch {
	case !s.authorized(x.r):
		x.fail(http.StatusUnauthorized, "auth_error", "Invalid user key")
	case s.limits[e] > 0:
		s.limits[e]--
		x.status = http.StatusTooManyRequests
		switch s.n429 % 3 {
		case 0:
			x.resp = "API requests too frequent endpoint threshold=4.5"
		case 1:
			x.resp = map[string]any{"detail": "API requests too frequent"}
		default:
			x.fail(http.StatusTooManyRequests, "rate_limit_exceeded", "API requests too frequent")
		}
		s.n429++
	default:
		h(x)
	}
	if e == EndpointCreate || e == EndpointDestroy {
		s.calls = append(s.calls, Call{Endpoint: e, Offer: x.offer, Contract: x.contract, Status: x.status,
			Body: x.body, Payload: x.payload, At: s.opts.Clock()})
	}
}

func (s *Server) authorized(r *http.Request) bool {
	if key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return key == s.opts.APIKey
	}
	return r.URL.Query().Get("api_key") == s.opts.APIKey
}

// searchOffers serves POST /bundles/: the body's filters ({field: {op:
// value}}), order, type and limit over the offers not rented.
func (s *Server) searchOffers(x *exchange) {
	s.search = append(s.search, x.body)
	var q map[string]json.RawMessage
	if err := json.Unmarshal(x.body, &q); err != nil {
		x.fail(http.StatusBadRequest, "invalid_args", "invalid query: "+err.Error())
		return
	}
	order := [][]string{{"score", "desc"}}
	limit := 0
	type filter struct {
		field, op string
		value     any
	}
	var filters []filter
	for k, raw := range q {
		var err error
		switch k {
		case "order":
			err = json.Unmarshal(raw, &order)
		case "limit":
			err = json.Unmarshal(raw, &limit)
		case "type":
			var t string
			if err = json.Unmarshal(raw, &t); err == nil && !slices.Contains([]string{"ondemand", "on-demand", "bid", "reserved"}, t) {
				err = fmt.Errorf("unknown type %q", t)
			}
		case "allocated_storage":
			var gb float64
			err = json.Unmarshal(raw, &gb)
		default:
			var ops map[string]any
			if err = json.Unmarshal(raw, &ops); err != nil {
				break
			}
			for op, v := range ops {
				if !slices.Contains([]string{"eq", "neq", "gt", "gte", "lt", "lte", "in", "notin"}, op) {
					err = fmt.Errorf("unknown operator %q", op)
				}
				filters = append(filters, filter{k, op, v})
			}
		}
		if err != nil {
			x.fail(http.StatusBadRequest, "invalid_args", fmt.Sprintf("%s: %v", k, err))
			return
		}
	}
	var rows []map[string]any
	for _, o := range s.offers {
		if o.Rented {
			continue
		}
		row := fields(o)
		if !slices.ContainsFunc(filters, func(f filter) bool { return !match(row[f.field], f.op, f.value) }) {
			rows = append(rows, row)
		}
	}
	slices.SortStableFunc(rows, func(a, b map[string]any) int {
		for _, o := range order {
			if len(o) == 0 {
				continue
			}
			c := compare(a[o[0]], b[o[0]])
			if len(o) > 1 && o[1] == "desc" {
				c = -c
			}
			if c != 0 {
				return c
			}
		}
		return 0
	})
	if limit > 0 && len(rows) > limit {
		rows = rows[:limit]
	}
	if rows == nil {
		rows = []map[string]any{}
	}
	x.answer(http.StatusOK, map[string]any{"offers": rows})
}

// fields returns v's JSON fields, numbers as float64.
func fields(v any) map[string]any {
	b, _ := json.Marshal(v)
	var m map[string]any
	json.Unmarshal(b, &m)
	return m
}

// match reports whether field value v satisfies op want. A field the
// offer lacks satisfies nothing.
func match(v any, op string, want any) bool {
	if v == nil {
		return false
	}
	switch op {
	case "eq":
		return compare(v, want) == 0
	case "neq":
		return compare(v, want) != 0
	case "gt":
		return compare(v, want) > 0
	case "gte":
		return compare(v, want) >= 0
	case "lt":
		return compare(v, want) < 0
	case "lte":
		return compare(v, want) <= 0
	}
	list, _ := want.([]any)
	in := slices.ContainsFunc(list, func(w any) bool { return compare(v, w) == 0 })
	return in == (op == "in")
}

// compare orders two JSON values: numbers by value, bools false first,
// strings lexically; values of different kinds compare by their text.
func compare(a, b any) int {
	switch a := a.(type) {
	case float64:
		if b, ok := b.(float64); ok {
			switch {
			case a < b:
				return -1
			case a > b:
				return 1
			}
			return 0
		}
	case bool:
		if b, ok := b.(bool); ok {
			switch {
			case a == b:
				return 0
			case !a:
				return -1
			}
			return 1
		}
	case string:
		if b, ok := b.(string); ok {
			return strings.Compare(a, b)
		}
	}
	return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
}

// create serves PUT /asks/{id}/.
func (s *Server) create(x *exchange) {
	id, err := strconv.ParseInt(x.r.PathValue("id"), 10, 64)
	if err != nil {
		x.fail(http.StatusBadRequest, "invalid_args", "invalid ask id")
		return
	}
	x.offer = id
	p, err := decodePayload(x.body)
	if err != nil {
		x.answer(http.StatusBadRequest, map[string]any{"success": false, "error": "invalid_args", "msg": err.Error(), "ask_id": id})
		return
	}
	x.payload = p
	if code, msg := validate(p); code != "" {
		x.answer(http.StatusBadRequest, map[string]any{"success": false, "error": code, "msg": msg, "ask_id": id})
		return
	}
	i := slices.IndexFunc(s.offers, func(o *Offer) bool { return o.ID == id })
	switch {
	case i < 0:
		x.answer(http.StatusNotFound, map[string]any{"success": false, "error": "no_such_ask", "msg": fmt.Sprintf("Instance type by id %d is not available.", id), "ask_id": id})
		return
	case s.offers[i].Rented && p.CancelUnavail:
		x.answer(http.StatusGone, map[string]any{"success": false, "error": "no_such_ask", "msg": fmt.Sprintf("Instance type by id %d is no longer available.", id), "ask_id": id})
		return
	case s.offers[i].Rented:
		x.answer(http.StatusNotFound, map[string]any{"success": false, "error": "no_such_ask", "msg": fmt.Sprintf("Instance type by id %d is not available.", id), "ask_id": id})
		return
	}
	o := s.offers[i]
	o.Rented, o.Rentable = true, false
	in := &rental{Instance: Instance{ID: s.next, Machine: o.MachineID, Offer: id, Fault: s.opts.Faults[o.MachineID],
		Payload: *p, Created: s.opts.Clock(), Live: true}, price: o.DPHTotal, intended: "running", cur: "running"}
	s.next++
	s.insts[in.ID] = in
	in.keys = slices.Clone(s.keys)
	x.contract = in.ID
	if in.Fault == FaultRefused {
		in.intended, in.cur, in.Status = "stopped", "stopped", "stopped"
		in.statusMsg = "instance created stopped: the machine could not start it"
		x.answer(http.StatusBadRequest, map[string]any{"success": false, "error": "start_failed",
			"msg": "the instance was created but could not be started", "new_contract": in.ID, "ask_id": id})
		return
	}
	x.answer(http.StatusOK, map[string]any{"success": true, "new_contract": in.ID})
}

// decodePayload decodes a create's body; env may be an object or a flag
// string.
func decodePayload(body []byte) (*CreatePayload, error) {
	var p CreatePayload
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fmt.Errorf("invalid body: %w", err)
	}
	var env struct {
		Env json.RawMessage `json:"env"`
	}
	json.Unmarshal(body, &env)
	p.Env = map[string]string{}
	raw := bytes.TrimSpace(env.Env)
	switch {
	case len(raw) == 0 || string(raw) == "null":
	case raw[0] == '{':
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("env: %w", err)
		}
		for k, v := range m {
			if s, ok := v.(string); ok {
				p.Env[k] = s
			} else {
				p.Env[k] = fmt.Sprint(v)
			}
		}
	case raw[0] == '"':
		var flags string
		json.Unmarshal(raw, &flags)
		parseFlags(flags, p.Env)
	default:
		return nil, fmt.Errorf("env: neither an object nor a string")
	}
	return &p, nil
}

// parseFlags reads a docker flag string: "-e K=V" sets K, any other flag
// with its argument ("-p 8000:8000") becomes a key valued "1".
func parseFlags(s string, env map[string]string) {
	f := strings.Fields(s)
	for i := 0; i < len(f); i++ {
		flag := f[i]
		arg := ""
		if i+1 < len(f) && !strings.HasPrefix(f[i+1], "-") {
			arg = f[i+1]
			i++
		}
		if flag == "-e" || flag == "--env" {
			k, v, _ := strings.Cut(arg, "=")
			env[k] = v
			continue
		}
		env[strings.TrimSpace(flag+" "+arg)] = "1"
	}
}

// validate applies Vast's limits to a create's payload; it returns the
// error code and message, "" when p is fine.
func validate(p *CreatePayload) (code, msg string) {
	envTotal := 0
	for k, v := range p.Env {
		if len(v) > 256 {
			return "invalid_args", fmt.Sprintf("env %s: value longer than 256 characters", k)
		}
		envTotal += len(k) + len(v)
	}
	switch {
	case p.Image == "":
		return "invalid_args", "image: required"
	case len(p.Image) > 1024:
		return "invalid_args", "image: longer than 1024 characters"
	case p.Disk < 8:
		return "invalid_args", fmt.Sprintf("disk: %g GB is under the 8 GB minimum", p.Disk)
	case len(p.Label) > 256:
		return "invalid_args", "label: longer than 256 characters"
	case len(strings.Join(p.Args, " "))+len(p.ArgsStr)+len(p.Onstart) > 4096:
		return "invalid_args", "onstart: args, args_str and onstart together are longer than 4096 characters"
	case envTotal > 32768:
		return "invalid_args", "env: longer than 32768 characters in all"
	case !slices.Contains([]string{"", "ssh", "ssh_proxy", "ssh_direct", "jupyter", "jupyter_proxy", "jupyter_direct", "args"}, p.Runtype):
		return "invalid_args", fmt.Sprintf("runtype: unknown %q", p.Runtype)
	case p.Price != nil && (*p.Price < 0.001 || *p.Price > 128):
		return "invalid_price", "price: must be between 0.001 and 128"
	}
	return "", ""
}

// observe brings in's state to the clock's time: it boots through its
// stages, its machine starts on the Host when it reaches running, and an
// instance of a vanish machine disappears once shown running.
func (s *Server) observe(in *rental) {
	if !in.Live || in.intended == "stopped" {
		return
	}
	now := s.opts.Clock()
	stage := 3
	if s.opts.Stage > 0 {
		stage = min(3, int(now.Sub(in.Created)/s.opts.Stage))
	}
	if in.Fault == FaultCDI {
		stage = min(stage, 1)
	}
	switch stage {
	case 0:
		in.Status, in.statusMsg = "", ""
	case 1:
		in.Status, in.statusMsg = "created", "Creating container"
		if in.Fault == FaultCDI {
			in.statusMsg = `Error response from daemon: could not select device driver "" with capabilities: [[gpu]]: unresolvable CDI devices nvidia.com/gpu=all`
		}
	case 2:
		in.Status, in.statusMsg = "loading", "Pulling image "+in.Payload.Image
	default:
		if !in.started {
			s.startHost(in)
			in.runningSince = now
		}
		if in.Status != "running" {
			return
		}
		if in.Fault == FaultVanish && in.shownRunning && now.Sub(in.runningSince) >= s.opts.VanishAfter {
			s.end(in, true)
		}
	}
}

// startHost starts in's machine on the Host, if there is one.
func (s *Server) startHost(in *rental) {
	in.started = true
	in.Status, in.statusMsg = "running", "success, running "+in.Payload.Image+"/ssh"
	if s.opts.Host == nil {
		return
	}
	env := map[string]string{}
	for k, v := range in.Payload.Env {
		if !strings.HasPrefix(k, "-") {
			env[k] = v
		}
	}
	port, err := s.opts.Host.Start(in.ID, in.Machine, in.Fault, in.keys, env, in.Payload.Onstart)
	if err != nil {
		in.Status, in.statusMsg = "exited", "container exited: "+err.Error()
		return
	}
	in.SSHPort = port
}

// exposed returns the container ports a create's docker flags expose
// ("-p 8000:8000"), in order. The machine is this one, on loopback: each
// is reached on its own number.
func exposed(env map[string]string) []string {
	var ports []string
	for k := range env {
		if spec, ok := strings.CutPrefix(k, "-p "); ok {
			_, container, _ := strings.Cut(strings.TrimSpace(spec), ":")
			if n, err := strconv.Atoi(strings.TrimSuffix(container, "/tcp")); err == nil && n > 0 {
				ports = append(ports, strconv.Itoa(n))
			}
		}
	}
	slices.Sort(ports)
	return ports
}

// stopHost stops in's machine on the Host, if it was started.
func (s *Server) stopHost(in *rental) {
	if in.started && s.opts.Host != nil {
		s.opts.Host.Stop(in.ID)
	}
	in.started = false
}

// end ends in: destroyed, or vanished.
func (s *Server) end(in *rental, vanished bool) {
	s.stopHost(in)
	in.Live, in.Vanished, in.Ended = false, vanished, s.opts.Clock()
	for _, o := range s.offers {
		if o.MachineID == in.Machine {
			o.Rented, o.Rentable = false, true
		}
	}
}

// view is in as Vast shows it.
func (s *Server) view(in *rental) map[string]any {
	var status any
	if in.Status != "" {
		status = in.Status
	}
	v := map[string]any{
		"id": in.ID, "machine_id": in.Machine, "host_id": 20000 + in.Machine, "label": in.Payload.Label,
		"actual_status": status, "intended_status": in.intended, "cur_state": in.cur, "next_state": in.cur,
		"status_msg": in.statusMsg, "public_ipaddr": "127.0.0.1", "ssh_host": "127.0.0.1", "ssh_port": in.SSHPort,
		"gpu_name": s.opts.GPUName, "num_gpus": s.opts.NumGPUs, "dph_total": in.price, "reliability2": 0.99,
		"image_uuid": in.Payload.Image, "start_date": float64(in.Created.UnixMilli()) / 1000,
	}
	if in.Status == "running" {
		ports := map[string]any{}
		if in.SSHPort > 0 {
			ports["22/tcp"] = []map[string]string{{"HostIp": "0.0.0.0", "HostPort": strconv.Itoa(in.SSHPort)}}
		}
		for _, port := range exposed(in.Payload.Env) {
			ports[port+"/tcp"] = []map[string]string{{"HostIp": "0.0.0.0", "HostPort": port}}
		}
		v["ports"] = ports
		in.shownRunning = true
	}
	return v
}

// show serves GET /instances/{id}/: a destroyed, vanished or unknown
// instance is {"instances":null}.
func (s *Server) show(x *exchange) {
	id, _ := strconv.ParseInt(x.r.PathValue("id"), 10, 64)
	in := s.insts[id]
	if in != nil {
		s.observe(in)
	}
	if in == nil || !in.Live {
		x.answer(http.StatusOK, map[string]any{"instances": nil})
		return
	}
	x.answer(http.StatusOK, map[string]any{"instances": s.view(in)})
}

// list serves GET /instances/: the live instances.
func (s *Server) list(x *exchange) {
	out := []map[string]any{}
	for _, in := range s.sorted() {
		s.observe(in)
		if in.Live {
			out = append(out, s.view(in))
		}
	}
	x.answer(http.StatusOK, map[string]any{"instances": out})
}

func (s *Server) sorted() []*rental {
	var out []*rental
	for _, in := range s.insts {
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b *rental) int { return int(a.ID - b.ID) })
	return out
}

// destroy serves DELETE /instances/{id}/: an unknown id is 404
// no_such_instance, one already destroyed or vanished 404 not_found.
func (s *Server) destroy(x *exchange) {
	id, _ := strconv.ParseInt(x.r.PathValue("id"), 10, 64)
	x.contract = id
	in := s.insts[id]
	switch {
	case in == nil:
		x.fail(http.StatusNotFound, "no_such_instance", fmt.Sprintf("Instance %d not found.", id))
	case !in.Live:
		x.fail(http.StatusNotFound, "not_found", fmt.Sprintf("Instance %d not found.", id))
	default:
		s.end(in, false)
		x.answer(http.StatusOK, map[string]any{"success": true})
	}
}

// listKeys serves GET /ssh/: the account's keys, as a list.
func (s *Server) listKeys(x *exchange) {
	out := []map[string]any{}
	for i, k := range s.keys {
		out = append(out, map[string]any{"id": i + 1, "user_id": 1, "public_key": k})
	}
	x.answer(http.StatusOK, out)
}

// addKey serves POST /ssh/ {"ssh_key": …}. Like the account page, it
// adds a key already there a second time.
func (s *Server) addKey(x *exchange) {
	var req struct {
		SSHKey string `json:"ssh_key"`
	}
	if err := json.Unmarshal(x.body, &req); err != nil || strings.TrimSpace(req.SSHKey) == "" {
		x.fail(http.StatusBadRequest, "invalid_args", "ssh_key: required")
		return
	}
	s.keys = append(s.keys, strings.TrimSpace(req.SSHKey))
	x.answer(http.StatusOK, map[string]any{"success": true, "key": map[string]any{"id": len(s.keys), "public_key": req.SSHKey}})
}
