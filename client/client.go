// Package client is the Go client of Berth's HTTP API, used by the CLI, the
// benchmark and tests. Every method returns the server's *berth.Error for an
// error response, or a wrapped transport error; Wait, and Logs when it
// follows, first ride out a time without a server as Client.Retry says and
// return an *OutageError when they give up.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/berth-dev/berth"
)

// Client talks to a server, or to whichever answers of the servers of one
// highly available control plane (see New). It is safe for concurrent use.
type Client struct {
	// Retry is how Wait, and Logs when it follows, ride out a server
	// restart or a failover; set it before the client's first use.
	Retry Retry

	servers *Servers
	token   string
	http    *http.Client
}

// New returns a client of servers, one URL (e.g. http://127.0.0.1:7070) or
// the comma-separated URLs of the servers of one control plane, sending
// token, if set, as a bearer token; tlsConfig, when not nil, verifies
// https:// servers (a pinned CA, see devca.ClientConfig), else the system's
// roots do.
//
// With several servers a request goes to the one that answered last (at
// first the first) and, when that one does not take it, to the others,
// each once: first the leader a standby names, when it is in the list,
// then the next in list order. A server does not take a request when it
// cannot be reached before the request is written (refused, reset or
// closed connection, failed dial) or when it is a standby (503 with
// LeaderHeader or a standby's error). A request that was written and got
// no answer (a reset, a timeout) may have been acted on; it is sent again
// elsewhere only when that is harmless: a GET, a wait, or a submission
// with an idempotency key (which Submit sets, see there). When no server
// takes it, the error names every server and ends with the last one's.
func New(servers, token string, tlsConfig *tls.Config) *Client {
	return &Client{servers: ParseServers(servers), token: token,
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, TLSClientConfig: tlsConfig}}}
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	_, err := c.doStatus(ctx, method, path, in, out)
	return err
}

// doStatus is do that also returns the (2xx) status of the response.
func (c *Client) doStatus(ctx context.Context, method, path string, in, out any) (int, error) {
	resp, err := c.send(ctx, method, path, in)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: decode response: %w", method, path, err)
	}
	return resp.StatusCode, nil
}

// send performs a request, failing over between the servers as New
// describes, and returns the response of a 2xx status; other statuses
// become the server's *berth.Error.
func (c *Client) send(ctx context.Context, method, path string, in any) (*http.Response, error) {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
	}
	resendable := idempotent(method, in)
	round := c.servers.Round()
	var leader string
	var err error
	for server, ok := round.Next(""); ok; server, ok = round.Next(leader) {
		var resp *http.Response
		var written bool
		resp, written, err = c.sendTo(ctx, server, method, path, body)
		if err != nil {
			if ctx.Err() != nil || (written && !resendable) {
				return nil, err
			}
			leader = ""
			continue
		}
		if resp.StatusCode/100 == 2 {
			round.Answered()
			resp.Body = &answerBody{ReadCloser: resp.Body, server: server}
			return resp, nil
		}
		err = responseError(method, path, resp)
		var standby bool
		if leader, standby = standbyLeader(resp, err); !standby {
			round.Answered()
			return nil, err
		}
	}
	return nil, round.Failed(err)
}

// sendTo sends one request to server. On a transport error, written says
// whether the request may have reached the server.
func (c *Client) sendTo(ctx context.Context, server, method, path string, body []byte) (resp *http.Response, written bool, err error) {
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GetConn:      func(string) { wrote.Store(false) }, // a new try: the transport retries only what it did not write, or a GET
		WroteHeaders: func() { wrote.Store(true) },
	})
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, server+path, r)
	if err != nil {
		return nil, false, fmt.Errorf("request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err = c.http.Do(req)
	if err != nil {
		return nil, wrote.Load(), &transportError{msg: "cannot reach the server at " + server, err: err}
	}
	return resp, true, nil
}

// responseError reads and closes the body of a non-2xx response and
// returns the server's *berth.Error, or an error naming the status when
// the body is not one.
func responseError(method, path string, resp *http.Response) error {
	defer resp.Body.Close()
	var eb berth.ErrorBody
	if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil || eb.Error == nil {
		return &statusError{method: method, path: path, status: resp.Status, code: resp.StatusCode}
	}
	return eb.Error
}

// idempotent reports whether sending a request again, after a server may
// have acted on it, changes nothing: a read, a wait or a submission with an
// idempotency key.
func idempotent(method string, in any) bool {
	switch in := in.(type) {
	case *berth.SubmitRequest:
		return in.IdempotencyKey != ""
	case berth.WaitRequest:
		return true
	}
	return method == http.MethodGet
}

// Submit submits a job (Array jobs when req.Array > 0). With several
// servers and no req.IdempotencyKey it submits a copy of req with a random
// key, so that a submission a failing server may have taken can be sent
// again to another: the server answers a repeated key with the jobs of
// the first submission. A job no worker could ever run is the server's
// ECodeUnsatisfiable error unless req.HoldUntilFits.
func (c *Client) Submit(ctx context.Context, req *berth.SubmitRequest) ([]*berth.Job, error) {
	sub, err := c.SubmitFull(ctx, req, false)
	if err != nil {
		return nil, err
	}
	return sub.Jobs, nil
}

// SubmitIDs queues a job or an array like Submit and returns only the new
// jobs' ids: the answer to a large array is a fraction of the size.
func (c *Client) SubmitIDs(ctx context.Context, req *berth.SubmitRequest) ([]string, error) {
	sub, err := c.SubmitFull(ctx, req, true)
	if err != nil {
		return nil, err
	}
	return sub.IDs, nil
}

// Submission is what a submission made, as the server reports it.
type Submission struct {
	Jobs []*berth.Job // nil when only the ids were asked for
	IDs  []string
	// Replayed is true when the server answered with the jobs of an
	// earlier submission of the same request under the same idempotency
	// key (200, not 201): nothing new was stored.
	Replayed bool
	Warnings []string // what the server noticed, e.g. a queue no worker serves
}

// SubmitFull queues a job or an array like Submit and returns the whole
// Submission: the jobs in full, or with idsOnly their ids alone, whether
// they were replayed, and warnings. Errors are Submit's; a different
// request under a key its user has used is the server's ECodeConflict
// error.
func (c *Client) SubmitFull(ctx context.Context, req *berth.SubmitRequest, idsOnly bool) (*Submission, error) {
	var status int
	var err error
	sub := &Submission{}
	if idsOnly {
		var out berth.SubmitIDsResponse
		status, err = c.doStatus(ctx, http.MethodPost, "/api/v1/jobs?ids_only=true", c.keyed(req), &out)
		sub.IDs, sub.Warnings = out.IDs, out.Warnings
	} else {
		var out berth.SubmitResponse
		status, err = c.doStatus(ctx, http.MethodPost, "/api/v1/jobs", c.keyed(req), &out)
		sub.Jobs, sub.Warnings = out.Jobs, out.Warnings
		for _, j := range out.Jobs {
			sub.IDs = append(sub.IDs, j.ID)
		}
	}
	if err != nil {
		return nil, err
	}
	sub.Replayed = status == http.StatusOK
	return sub, nil
}

// keyed returns req with an idempotency key when it has none and there is
// more than one server to try, so that a retry on another server cannot
// submit twice.
func (c *Client) keyed(req *berth.SubmitRequest) *berth.SubmitRequest {
	if req.IdempotencyKey == "" && len(c.servers.urls) > 1 {
		keyed := *req
		keyed.IdempotencyKey = rand.Text()
		return &keyed
	}
	return req
}

// ListOptions filter a job listing. Limit 0 lists every job.
type ListOptions struct {
	States []berth.JobState
	Queue  string
	User   string
	Parent string // only the jobs submitted under this job
	Name   string // only the jobs of this name
	Limit  int
	Cursor string
}

// Jobs returns one page of jobs, newest first.
func (c *Client) Jobs(ctx context.Context, o ListOptions) (*berth.JobList, error) {
	q := url.Values{}
	if len(o.States) > 0 {
		names := make([]string, len(o.States))
		for i, s := range o.States {
			names[i] = string(s)
		}
		q.Set("state", strings.Join(names, ","))
	}
	if o.Queue != "" {
		q.Set("queue", o.Queue)
	}
	if o.User != "" {
		q.Set("user", o.User)
	}
	if o.Parent != "" {
		q.Set("parent", o.Parent)
	}
	if o.Name != "" {
		q.Set("name", o.Name)
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	q.Set("limit", strconv.Itoa(o.Limit))
	var out berth.JobList
	err := c.do(ctx, http.MethodGet, "/api/v1/jobs?"+q.Encode(), nil, &out)
	return &out, err
}

// Job returns a job with its attempts.
func (c *Client) Job(ctx context.Context, id string) (*berth.JobDetail, error) {
	var out berth.JobDetail
	err := c.do(ctx, http.MethodGet, "/api/v1/jobs/"+url.PathEscape(id), nil, &out)
	return &out, err
}

// AttemptValidity asks whether attempt id may still act for its job (the
// fencing check before an external side effect); an answer with Valid
// false is not an error. An unknown attempt is the server's ECodeNotFound.
func (c *Client) AttemptValidity(ctx context.Context, id string) (*berth.AttemptValidity, error) {
	var out berth.AttemptValidity
	err := c.do(ctx, http.MethodGet, "/api/v1/attempts/"+url.PathEscape(id)+"/valid", nil, &out)
	return &out, err
}

// Cancel cancels a job and returns it as it is after the request.
func (c *Client) Cancel(ctx context.Context, id string) (*berth.Job, error) {
	var out berth.Job
	err := c.do(ctx, http.MethodPost, "/api/v1/jobs/"+url.PathEscape(id)+"/cancel", nil, &out)
	return &out, err
}

// CancelMatching cancels every active job that req matches and returns
// them as they are after the request, oldest first.
func (c *Client) CancelMatching(ctx context.Context, req berth.CancelRequest) ([]*berth.Job, error) {
	var out berth.JobList
	err := c.do(ctx, http.MethodPost, "/api/v1/jobs/cancel", req, &out)
	return out.Jobs, err
}

// Workers lists the workers.
func (c *Client) Workers(ctx context.Context) ([]*berth.Worker, error) {
	var out berth.WorkerList
	err := c.do(ctx, http.MethodGet, "/api/v1/workers", nil, &out)
	return out.Workers, err
}

// SetWorkerControl turns one queue of host (every queue when req.Queue is
// empty) on or off and returns the host's controls and the attempts the
// change is stopping. The server's invalid error names the offending field.
func (c *Client) SetWorkerControl(ctx context.Context, host string, req berth.ControlRequest) (*berth.ControlResponse, error) {
	var out berth.ControlResponse
	err := c.do(ctx, http.MethodPut, "/api/v1/workers/"+url.PathEscape(host)+"/control", req, &out)
	return &out, err
}

// WorkerControls returns host's controls, by queue.
func (c *Client) WorkerControls(ctx context.Context, host string) ([]*berth.WorkerControl, error) {
	var out berth.ControlList
	err := c.do(ctx, http.MethodGet, "/api/v1/workers/"+url.PathEscape(host)+"/control", nil, &out)
	return out.Controls, err
}

// SetQuota creates or replaces the quota rule q.ID() with q's limits and
// returns the rule as stored; created reports whether it is new. The
// server's invalid error names the offending field.
func (c *Client) SetQuota(ctx context.Context, q berth.QuotaRule) (rule *berth.QuotaRule, created bool, err error) {
	var out berth.QuotaRule
	status, err := c.doStatus(ctx, http.MethodPut, "/api/v1/quotas/"+url.PathEscape(q.ID()), q, &out)
	if err != nil {
		return nil, false, err
	}
	return &out, status == http.StatusCreated, nil
}

// Quotas lists every quota rule, by id.
func (c *Client) Quotas(ctx context.Context) ([]*berth.QuotaRule, error) {
	var out berth.QuotaList
	err := c.do(ctx, http.MethodGet, "/api/v1/quotas", nil, &out)
	return out.Quotas, err
}

// DeleteQuota deletes the quota rule with id "SCOPE:NAME"; an unknown id
// is the server's not_found error.
func (c *Client) DeleteQuota(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/api/v1/quotas/"+url.PathEscape(id), nil, nil)
}

// LogOptions say which output Logs copies, and for how long.
type LogOptions struct {
	// Follow keeps copying until the job (or the attempt) ends.
	Follow bool
	// Attempt is the attempt, from 1, whose output alone is copied,
	// without a header; 0: every attempt's.
	Attempt int
}

// Logs copies a job's output to w; with Follow it keeps copying until the
// job ends or ctx does, riding out a server restart or failover as Retry
// says: it asks again from the offset it has written up to. A stream that
// ends cleanly is the server's word that the job has ended.
func (c *Client) Logs(ctx context.Context, id string, opts LogOptions, w io.Writer) error {
	cw := &countingWriter{w: w}
	o := newOutage(&c.Retry, 0)
	for {
		path := fmt.Sprintf("/api/v1/jobs/%s/logs?follow=%t&attempt=%d&offset=%d", url.PathEscape(id), opts.Follow, opts.Attempt, cw.n)
		answered, err := c.copyLogs(ctx, path, cw)
		if err == nil || !opts.Follow {
			return err
		}
		if answered {
			o.answered()
		}
		if err := o.pause(ctx, err); err != nil {
			return err
		}
	}
}

// copyLogs asks once for the logs at path and copies the answer to w,
// and reports whether the server answered.
func (c *Client) copyLogs(ctx context.Context, path string, w io.Writer) (answered bool, err error) {
	resp, err := c.send(ctx, http.MethodGet, path, nil)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	if err != nil && ctx.Err() != nil {
		return true, ctx.Err()
	}
	return true, err
}

// LogRecords calls fn with each record of a job's output (its stdout and
// stderr told apart, a gang's members side by side; see berth.LogRecord)
// in the order the server sends them; with follow it goes on until the job
// ends or ctx does, riding out a server restart or failover as Retry says:
// it asks again and passes fn only the bytes it has not had. An error fn
// returns ends it and is returned. A stream that ends cleanly is the
// server's word that the job has ended (or, without follow, that all the
// output stored so far is sent).
func (c *Client) LogRecords(ctx context.Context, id string, follow bool, fn func(*berth.LogRecord) error) error {
	had := map[string]int64{} // bytes passed to fn of each attempt's output
	o := newOutage(&c.Retry, 0)
	for {
		path := fmt.Sprintf("/api/v1/jobs/%s/logs?format=records&follow=%t", url.PathEscape(id), follow)
		answered, err := c.readRecords(ctx, path, func(rec *berth.LogRecord) error {
			end := rec.Offset + int64(len(rec.Data))
			seen := had[rec.AttemptID]
			if end <= seen {
				return nil // had before the server was asked again
			}
			if rec.Offset < seen {
				rec.Data, rec.Offset = rec.Data[seen-rec.Offset:], seen
			}
			had[rec.AttemptID] = end
			return fn(rec)
		})
		var fnErr *recordError
		if errors.As(err, &fnErr) {
			return fnErr.err
		}
		if err == nil || !follow {
			return err
		}
		if answered {
			o.answered()
		}
		if err := o.pause(ctx, err); err != nil {
			return err
		}
	}
}

// recordError is an error of LogRecords' fn, which ends it.
type recordError struct{ err error }

func (e *recordError) Error() string { return e.err.Error() }

// readRecords asks once for the log records at path and passes each to
// fn, and reports whether the server answered.
func (c *Client) readRecords(ctx context.Context, path string, fn func(*berth.LogRecord) error) (answered bool, err error) {
	resp, err := c.send(ctx, http.MethodGet, path, nil)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var rec berth.LogRecord
		if err := dec.Decode(&rec); err != nil {
			if errors.Is(err, io.EOF) {
				return true, nil
			}
			if ctx.Err() != nil {
				return true, ctx.Err()
			}
			return true, fmt.Errorf("read log records: %w", err)
		}
		if err := fn(&rec); err != nil {
			return true, &recordError{err}
		}
	}
}

// countingWriter counts the bytes written to w.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Wait waits until every job in ids (or, with all, every batch job active
// now: the caller's own unless it reads every user's jobs; a service only
// when named) has ended, or timeout passes (0: no limit); the result's Done
// says which.
// It long-polls the server a minute at a time, riding out a server restart
// or failover as Retry says (a wait is safe to ask again), within timeout.
func (c *Client) Wait(ctx context.Context, ids []string, all bool, timeout time.Duration) (*berth.WaitResult, error) {
	o := newOutage(&c.Retry, timeout)
	acc := &berth.WaitResult{Counts: map[berth.JobState]int{}}
	for first := true; ; {
		out, err := c.waitOnce(ctx, ids, all, o.deadline)
		if err != nil {
			if err := o.pause(ctx, err); err != nil {
				return nil, err
			}
			continue
		}
		o.answered()
		if first {
			acc.Total, acc.Services, first = out.Total, out.Services, false
		}
		for st, n := range out.Counts {
			acc.Counts[st] += n
		}
		acc.Failures = append(acc.Failures, out.Failures...)
		acc.Pending, acc.PendingIDs = out.Pending, out.PendingIDs
		if out.Done || o.past() {
			acc.Done = out.Done
			return acc, nil
		}
		ids, all = out.PendingIDs, false
	}
}

// waitOnce long-polls the server once: a minute at most, and not past
// deadline when it is set.
func (c *Client) waitOnce(ctx context.Context, ids []string, all bool, deadline time.Time) (*berth.WaitResult, error) {
	poll := time.Minute
	if !deadline.IsZero() {
		poll = max(min(poll, deadline.Sub(c.Retry.now())), time.Millisecond)
	}
	var out berth.WaitResult
	req := berth.WaitRequest{IDs: ids, All: all, Timeout: berth.Duration(poll)}
	return &out, c.do(ctx, http.MethodPost, "/api/v1/wait", req, &out)
}

// Healthz reports whether a server answers its health check (a standby
// does too).
func (c *Client) Healthz(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/healthz", nil, nil)
}

// CreateToken issues a token (admins only); the response holds the token
// itself, shown this once.
func (c *Client) CreateToken(ctx context.Context, req berth.TokenRequest) (*berth.IssuedToken, error) {
	var out berth.IssuedToken
	return &out, c.do(ctx, http.MethodPost, "/api/v1/tokens", req, &out)
}

// Tokens lists the token registry (admins only), oldest first.
func (c *Client) Tokens(ctx context.Context) ([]*berth.Token, error) {
	var out berth.TokenList
	return out.Tokens, c.do(ctx, http.MethodGet, "/api/v1/tokens", nil, &out)
}

// RevokeToken revokes a token (admins only) and returns its record.
func (c *Client) RevokeToken(ctx context.Context, id string) (*berth.Token, error) {
	var out berth.Token
	return &out, c.do(ctx, http.MethodDelete, "/api/v1/tokens/"+url.PathEscape(id), nil, &out)
}

// Join trades the client's token, a join token, for an agent credential
// bound to host.
func (c *Client) Join(ctx context.Context, host string) (*berth.IssuedToken, error) {
	var out berth.IssuedToken
	return &out, c.do(ctx, http.MethodPost, "/api/v1/agents/join", berth.JoinRequest{Host: host}, &out)
}

// SetSecret creates or replaces the secret name of owner ("" for the
// caller's own; another owner's for admins only).
func (c *Client) SetSecret(ctx context.Context, owner, name, value string) (*berth.Secret, error) {
	var out berth.Secret
	return &out, c.do(ctx, http.MethodPut, "/api/v1/secrets/"+url.PathEscape(name), berth.SecretRequest{Value: value, Owner: owner}, &out)
}

// Secrets lists the names of owner's secrets ("" for the caller's own,
// "*" for everyone's, admins only).
func (c *Client) Secrets(ctx context.Context, owner string) ([]*berth.Secret, error) {
	var out berth.SecretList
	return out.Secrets, c.do(ctx, http.MethodGet, "/api/v1/secrets?owner="+url.QueryEscape(owner), nil, &out)
}

// DeleteSecret deletes owner's secret name ("" for the caller's own).
func (c *Client) DeleteSecret(ctx context.Context, owner, name string) error {
	return c.do(ctx, http.MethodDelete, "/api/v1/secrets/"+url.PathEscape(name)+"?owner="+url.QueryEscape(owner), nil, nil)
}

// Services lists the active service jobs with where their current attempt
// serves and its readiness phase.
func (c *Client) Services(ctx context.Context) ([]*berth.Service, error) {
	var out berth.ServiceList
	return out.Services, c.do(ctx, http.MethodGet, "/api/v1/services", nil, &out)
}

// Endpoints lists the endpoints of the ready services.
func (c *Client) Endpoints(ctx context.Context) ([]*berth.Endpoint, error) {
	var out berth.EndpointList
	return out.Endpoints, c.do(ctx, http.MethodGet, "/api/v1/endpoints", nil, &out)
}
