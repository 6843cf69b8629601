// Package vast implements cloud.Provider over Vast.ai's REST API (v0):
// offers searched with POST /bundles/, instances created with an explicit
// payload (PUT /asks/{id}/), shown, listed by label, destroyed, and the
// account's SSH keys registered (/ssh/). Idempotent calls retry 429, 502,
// 503 and 504 as Vast's CLI does (3 tries, 0.15 s × 1.5ⁿ apart); a create
// is never retried. cloud/vast/vasttest is a fake of the same API.
package vast

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/cloud"
)

// DefaultURL is Vast's API.
const DefaultURL = "https://console.vast.ai/api/v0"

// Retry policy of idempotent calls, as Vast's CLI has it.
const (
	tries        = 3
	firstBackoff = 150 * time.Millisecond
)

// ErrAuth is the cause of the error every call returns when Vast refuses
// the API key (401): a berth.Error, invalid, naming the field api_key.
var ErrAuth = errors.New("vast refused the API key")

// ErrRateLimited is the cause of the error an idempotent call returns when
// Vast still answers 429 after the retries.
var ErrRateLimited = errors.New("vast rate limit")

// Config configures a Client.
type Config struct {
	URL    string // the API's base URL; "" is DefaultURL
	APIKey string
	// HTTPClient sends the requests; nil is a client with a 30 s timeout.
	HTTPClient *http.Client
	// Backoff is the wait before the first retry (growing 1.5× each
	// time); 0 is 150 ms.
	Backoff time.Duration
}

// Client is a Vast.ai account. It is safe for concurrent use.
type Client struct {
	url     string
	key     string
	http    *http.Client
	backoff time.Duration
}

var _ cloud.Provider = (*Client)(nil)

// New returns a client for cfg; an empty APIKey is an error naming it.
func New(cfg Config) (*Client, error) {
	if cfg.APIKey == "" {
		return nil, berth.Invalidf("api_key", "a Vast API key is required")
	}
	c := &Client{url: strings.TrimRight(cfg.URL, "/"), key: cfg.APIKey, http: cfg.HTTPClient, backoff: cfg.Backoff}
	if c.url == "" {
		c.url = DefaultURL
	}
	if c.http == nil {
		c.http = &http.Client{Timeout: 30 * time.Second}
	}
	if c.backoff == 0 {
		c.backoff = firstBackoff
	}
	return c, nil
}

// Name returns "vast".
func (c *Client) Name() string { return "vast" }

// apiError is a non-2xx answer: its status and Vast's error fields (msg
// is the text of a body that was not Vast's JSON, a plain-text 429).
type apiError struct {
	method, path string
	status       int
	code, msg    string
	contract     int64
}

func (e *apiError) Error() string {
	return fmt.Sprintf("vast %s %s: %d %s: %s", e.method, e.path, e.status, e.code, e.msg)
}

// reply is a response read whole.
type reply struct {
	status int
	body   []byte
}

// send makes one request and reads its reply.
func (c *Client) send(ctx context.Context, method, path string, body any) (*reply, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("vast %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, rd)
	if err != nil {
		return nil, fmt.Errorf("vast %s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("vast %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, fmt.Errorf("vast %s %s: read: %w", method, path, err)
	}
	return &reply{status: resp.StatusCode, body: b}, nil
}

// retryable reports whether an idempotent call is tried again after
// status.
func retryable(status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// do makes an idempotent call, retrying as the CLI does, and decodes a
// 2xx body into out (when not nil). Other answers are errors: 401 wraps
// ErrAuth, a 429 after the last try ErrRateLimited, the rest *apiError.
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	wait := c.backoff
	var r *reply
	for try := 1; ; try++ {
		var err error
		if r, err = c.send(ctx, method, path, body); err != nil {
			return err
		}
		if !retryable(r.status) || try == tries {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("vast %s %s: %w", method, path, ctx.Err())
		case <-time.After(wait):
		}
		wait = wait * 3 / 2
	}
	if err := c.check(method, path, r); err != nil {
		return err
	}
	if out != nil {
		if err := json.Unmarshal(r.body, out); err != nil {
			return fmt.Errorf("vast %s %s: decode: %w", method, path, err)
		}
	}
	return nil
}

// check turns a non-2xx reply into its error.
func (c *Client) check(method, path string, r *reply) error {
	if r.status/100 == 2 {
		return nil
	}
	e := decodeError(method, path, r)
	switch r.status {
	case http.StatusUnauthorized:
		// Not ECodeUnauthorized: that would tell Berth's own caller that
		// its token was refused. The pool's key is the field at fault.
		return &berth.Error{Code: berth.ECodeInvalid, Field: "api_key", Message: fmt.Sprintf("vast %s %s: %s", method, path, e.msg), Err: ErrAuth}
	case http.StatusTooManyRequests:
		return fmt.Errorf("vast %s %s: still 429 after %d tries (%s): %w", method, path, tries, e.msg, ErrRateLimited)
	}
	return e
}

// decodeError reads Vast's error fields from a reply; a body that is not
// JSON (a plain-text 429) becomes the message.
func decodeError(method, path string, r *reply) *apiError {
	var b struct {
		Error       string `json:"error"`
		Msg         string `json:"msg"`
		Detail      any    `json:"detail"`
		NewContract int64  `json:"new_contract"`
	}
	e := &apiError{method: method, path: path, status: r.status}
	if json.Unmarshal(r.body, &b) != nil {
		e.msg = strings.TrimSpace(string(r.body))
		if len(e.msg) > 512 {
			e.msg = e.msg[:512]
		}
	} else {
		e.code, e.msg, e.contract = b.Error, b.Msg, b.NewContract
		if e.msg == "" && b.Detail != nil {
			e.msg = fmt.Sprint(b.Detail)
		}
	}
	if e.code == "" && r.status == http.StatusTooManyRequests {
		e.code = "rate_limit_exceeded"
	}
	if e.msg == "" {
		e.msg = http.StatusText(r.status)
	}
	return e
}

// SearchOffers searches POST /bundles/ with q's filters and drops the
// excluded machines the answer still holds.
func (c *Client) SearchOffers(ctx context.Context, q cloud.OfferQuery) ([]cloud.Offer, error) {
	body, err := searchBody(q)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Offers []json.RawMessage `json:"offers"`
	}
	if err := c.do(ctx, http.MethodPost, "/bundles/", body, &resp); err != nil {
		return nil, err
	}
	excluded := map[int64]bool{}
	for _, m := range q.ExcludeMachines {
		excluded[m] = true
	}
	offers := []cloud.Offer{}
	for _, raw := range resp.Offers {
		var o cloud.Offer
		var extra struct {
			Verification string `json:"verification"`
		}
		if err := json.Unmarshal(raw, &o); err != nil {
			return nil, fmt.Errorf("vast search: decode an offer: %w", err)
		}
		json.Unmarshal(raw, &extra)
		o.Verified = o.Verified || extra.Verification == "verified"
		if !excluded[o.MachineID] {
			offers = append(offers, o)
		}
	}
	return offers, nil
}

// searchBody is q as Vast's search body: {field: {operator: value}},
// with the usual defaults (rentable, not rented, on demand). q.OrderBy is
// "field [asc|desc]"; "" orders by score, best first.
func searchBody(q cloud.OfferQuery) (map[string]any, error) {
	b := map[string]any{
		"rentable": map[string]any{"eq": true},
		"rented":   map[string]any{"eq": false},
		"type":     "ondemand",
	}
	set := func(field, op string, v any) { b[field] = map[string]any{op: v} }
	if q.GPUName != "" {
		set("gpu_name", "eq", q.GPUName)
	}
	if q.GPUs > 0 {
		set("num_gpus", "eq", q.GPUs)
	}
	if q.MinGPURAMMB > 0 {
		set("gpu_ram", "gte", q.MinGPURAMMB)
	}
	if q.MaxPricePerHour > 0 {
		set("dph_total", "lte", q.MaxPricePerHour)
	}
	if q.MinReliability > 0 {
		set("reliability2", "gte", q.MinReliability)
	}
	if q.Verified {
		set("verified", "eq", true)
	}
	if q.MinDirectPorts > 0 {
		set("direct_port_count", "gte", q.MinDirectPorts)
	}
	if q.MinInetDownMbps > 0 {
		set("inet_down", "gte", q.MinInetDownMbps)
	}
	if q.MinCUDA > 0 {
		set("cuda_max_good", "gte", q.MinCUDA)
	}
	if len(q.ExcludeMachines) > 0 {
		set("machine_id", "notin", q.ExcludeMachines)
	}
	if q.Limit > 0 {
		b["limit"] = q.Limit
	}
	order := []string{"score", "desc"}
	if q.OrderBy != "" {
		f := strings.Fields(q.OrderBy)
		if len(f) > 2 || len(f) == 2 && f[1] != "asc" && f[1] != "desc" {
			return nil, berth.Invalidf("order_by", "%q is not \"FIELD [asc|desc]\"", q.OrderBy)
		}
		order = append(f, "asc")[:2]
	}
	b["order"] = [][]string{order}
	return b, nil
}

// Create rents offer offerID: PUT /asks/{id}/ with req as an explicit
// ssh_direct payload (cancel_unavail set), sent once. A refusal is a
// *cloud.CreateError: Unavailable for Vast's no_such_ask (404, 410),
// Retryable with Contract 0 for a 429, and with the Contract the refusal
// still made, if any. An error that is not a *cloud.CreateError (the
// connection failed, a 5xx without a contract) leaves it unknown whether
// an instance was made: the caller lists by label before renting again.
func (c *Client) Create(ctx context.Context, offerID int64, req cloud.CreateRequest) (int64, error) {
	env := req.Env
	if env == nil {
		env = map[string]string{}
	}
	payload := map[string]any{
		"client_id": "me", "image": req.Image, "label": req.Label, "disk": req.DiskGB,
		"runtype": "ssh_direct", "env": env, "onstart": req.Onstart, "cancel_unavail": true,
	}
	path := "/asks/" + strconv.FormatInt(offerID, 10) + "/"
	r, err := c.send(ctx, http.MethodPut, path, payload)
	if err != nil {
		return 0, err
	}
	var ok struct {
		Success     bool  `json:"success"`
		NewContract int64 `json:"new_contract"`
	}
	if r.status/100 == 2 && json.Unmarshal(r.body, &ok) == nil && ok.Success && ok.NewContract != 0 {
		return ok.NewContract, nil
	}
	if r.status == http.StatusUnauthorized {
		return 0, c.check(http.MethodPut, path, r)
	}
	e := decodeError(http.MethodPut, path, r)
	if r.status/100 == 5 && e.contract == 0 {
		return 0, fmt.Errorf("%w (whether an instance was made is unknown: list by label before renting again)", e)
	}
	ce := &cloud.CreateError{Status: r.status, Code: e.code, Message: e.msg, Contract: e.contract}
	switch {
	case r.status == http.StatusTooManyRequests:
		ce.Contract, ce.Retryable = 0, true
	case e.code == "no_such_ask" || r.status == http.StatusNotFound || r.status == http.StatusGone:
		ce.Unavailable = true
	case ce.Code == "":
		ce.Code = "no_contract"
	}
	return 0, ce
}

// instanceJSON is an instance as Vast shows it.
type instanceJSON struct {
	ID             int64   `json:"id"`
	MachineID      int64   `json:"machine_id"`
	Label          *string `json:"label"`
	ActualStatus   *string `json:"actual_status"`
	IntendedStatus *string `json:"intended_status"`
	CurState       *string `json:"cur_state"`
	NextState      *string `json:"next_state"`
	StatusMsg      *string `json:"status_msg"`
	PublicIP       *string `json:"public_ipaddr"`
	SSHHost        *string `json:"ssh_host"`
	SSHPort        *int    `json:"ssh_port"`
	Ports          map[string][]struct {
		HostPort hostPort `json:"HostPort"`
	} `json:"ports"`
	GPUName  *string  `json:"gpu_name"`
	NumGPUs  *int     `json:"num_gpus"`
	DPHTotal *float64 `json:"dph_total"`
}

// hostPort is a port Vast sends as a string ("40022"), or a number.
type hostPort int

// UnmarshalJSON reads "40022", 40022 or "".
func (p *hostPort) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "" || s == "null" {
		*p = 0
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("HostPort %s: %w", b, err)
	}
	*p = hostPort(n)
	return nil
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// provider is j as a cloud.ProviderInstance.
func (j *instanceJSON) provider() *cloud.ProviderInstance {
	pi := &cloud.ProviderInstance{
		ID: j.ID, MachineID: j.MachineID, Label: str(j.Label), ActualStatus: str(j.ActualStatus),
		IntendedStatus: str(j.IntendedStatus), CurState: str(j.CurState), NextState: str(j.NextState),
		StatusMsg: str(j.StatusMsg), PublicIP: str(j.PublicIP), SSHHost: str(j.SSHHost), GPUName: str(j.GPUName),
	}
	if j.SSHPort != nil {
		pi.SSHPort = *j.SSHPort
	}
	if j.NumGPUs != nil {
		pi.NumGPUs = *j.NumGPUs
	}
	if j.DPHTotal != nil {
		pi.PricePerHour = *j.DPHTotal
	}
	for spec, m := range j.Ports {
		port, ok := strings.CutSuffix(spec, "/tcp")
		n, err := strconv.Atoi(port)
		if !ok || err != nil || len(m) == 0 || m[0].HostPort == 0 {
			continue
		}
		if pi.Ports == nil {
			pi.Ports = map[int]int{}
		}
		pi.Ports[n] = int(m[0].HostPort)
	}
	pi.DirectSSHPort = pi.Ports[22]
	return pi
}

// Show returns instance id (GET /instances/{id}/); Vast's
// {"instances":null} for a destroyed or unknown id, or a 404, is
// cloud.ErrGone.
func (c *Client) Show(ctx context.Context, id int64) (*cloud.ProviderInstance, error) {
	var resp struct {
		Instances *instanceJSON `json:"instances"`
	}
	err := c.do(ctx, http.MethodGet, "/instances/"+strconv.FormatInt(id, 10)+"/?owner=me", nil, &resp)
	var ae *apiError
	if errors.As(err, &ae) && ae.status == http.StatusNotFound {
		return nil, fmt.Errorf("vast instance %d: %w", id, cloud.ErrGone)
	}
	if err != nil {
		return nil, err
	}
	if resp.Instances == nil {
		return nil, fmt.Errorf("vast instance %d: %w", id, cloud.ErrGone)
	}
	return resp.Instances.provider(), nil
}

// List returns the account's instances whose label starts with
// labelPrefix (GET /instances/?owner=me, filtered here).
func (c *Client) List(ctx context.Context, labelPrefix string) ([]*cloud.ProviderInstance, error) {
	var resp struct {
		Instances []instanceJSON `json:"instances"`
	}
	if err := c.do(ctx, http.MethodGet, "/instances/?owner=me", nil, &resp); err != nil {
		return nil, err
	}
	var out []*cloud.ProviderInstance
	for i := range resp.Instances {
		if strings.HasPrefix(str(resp.Instances[i].Label), labelPrefix) {
			out = append(out, resp.Instances[i].provider())
		}
	}
	return out, nil
}

// Destroy gives instance id back (DELETE /instances/{id}/); Vast's 404
// (not_found, no_such_instance) says it is gone already: no error.
func (c *Client) Destroy(ctx context.Context, id int64) error {
	err := c.do(ctx, http.MethodDelete, "/instances/"+strconv.FormatInt(id, 10)+"/", nil, nil)
	var ae *apiError
	if errors.As(err, &ae) && ae.status == http.StatusNotFound {
		return nil
	}
	return err
}

// EnsureSSHKey registers publicKey with the account (POST /ssh/
// {"ssh_key": …}) unless GET /ssh/ lists it already; keys compare by
// type and base64 blob, not comment. Vast documents these endpoints only
// through its CLI (show ssh-keys, create ssh-key): the list is read as an
// array of objects whose key is in "public_key" (or "ssh_key", "key"),
// bare or under "ssh_keys" or "keys".
func (c *Client) EnsureSSHKey(ctx context.Context, publicKey string) error {
	want := keyID(publicKey)
	if want == "" {
		return berth.Invalidf("public_key", "%q is not an authorized_keys line (TYPE BASE64 [COMMENT])", publicKey)
	}
	var raw json.RawMessage
	if err := c.do(ctx, http.MethodGet, "/ssh/", nil, &raw); err != nil {
		return err
	}
	keys, err := decodeKeys(raw)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if keyID(k) == want {
			return nil
		}
	}
	return c.do(ctx, http.MethodPost, "/ssh/", map[string]string{"ssh_key": strings.TrimSpace(publicKey)}, nil)
}

// keyID is an authorized_keys line's type and blob; "" if it has not both.
func keyID(line string) string {
	f := strings.Fields(line)
	if len(f) < 2 {
		return ""
	}
	return f[0] + " " + f[1]
}

// decodeKeys reads the key list of GET /ssh/.
func decodeKeys(raw json.RawMessage) ([]string, error) {
	type key struct {
		PublicKey string `json:"public_key"`
		SSHKey    string `json:"ssh_key"`
		Key       string `json:"key"`
	}
	var list []key
	if err := json.Unmarshal(raw, &list); err != nil {
		var wrapped struct {
			SSHKeys []key `json:"ssh_keys"`
			Keys    []key `json:"keys"`
		}
		if err := json.Unmarshal(raw, &wrapped); err != nil {
			return nil, fmt.Errorf("vast GET /ssh/: decode: %w", err)
		}
		list = append(wrapped.SSHKeys, wrapped.Keys...)
	}
	var out []string
	for _, k := range list {
		out = append(out, k.PublicKey+k.SSHKey+k.Key)
	}
	return out, nil
}
