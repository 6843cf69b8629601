package agent

import (
	"errors"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/wire"
)

// TestAgentFailsOver gives an agent three servers: the first, a standby,
// names the third as the leader, and the agent registers there without
// trying the second. When the third steps down naming the first, the
// agent reconnects to it with its running attempt, which keeps running.
func TestAgentFailsOver(t *testing.T) {
	t.Parallel()
	first, unsure, third := newFakeServer(t), newFakeServer(t), newFakeServer(t)
	first.standBy(third.srv.URL)
	unsure.standBy("")
	startAgent(t, third, func(c *Config) { c.Server = first.srv.URL + "," + unsure.srv.URL + "," + third.srv.URL })
	isRegister := func(m wire.Message) bool { return m.Type == wire.TypeRegister }
	third.await("register", isRegister)
	third.assign(&wire.JobAssign{AttemptID: "a1", Command: []string{"sleep", "1000"}})

	first.lead()
	third.standBy(first.srv.URL)
	third.dropSession()
	reg := first.await("register", isRegister).Body.(*wire.Register)
	if !slices.Equal(reg.Running, []string{"a1"}) || len(reg.Finished) != 0 {
		t.Fatalf("register after the failover: running %q, finished %q; want running [a1]", reg.Running, reg.Finished)
	}
	first.await("a heartbeat with a1 running", func(m wire.Message) bool {
		hb, ok := m.Body.(*wire.Heartbeat)
		return ok && slices.Equal(hb.Running, []string{"a1"})
	})
	first.send(wire.TypeJobCancel, &wire.JobCancel{AttemptID: "a1", Reason: "cancelled by frank"})
	checkResult(t, first.result("a1"), berth.AttemptCancelled, "", nil, "cancelled by frank")
	if f, u, th := first.dialed(), unsure.dialed(), third.dialed(); f != 2 || u != 0 || th != 2 {
		t.Fatalf("WebSocket requests: first %d, second %d, third %d; want 2, 0, 2", f, u, th)
	}
}

// checkRefused checks that err is Run's refusal by server, with status,
// reason and the credential the agent sent: none, the one given, or the
// one saved in a file (saved).
func checkRefused(t *testing.T, err error, server string, status int, reason string, sent bool, saved string) {
	t.Helper()
	var re *RefusedError
	if !errors.As(err, &re) || !errors.Is(err, ErrRefused) {
		t.Fatalf("Run: %v; want a *RefusedError", err)
	}
	if re.Server != server || re.Status != status || re.Reason != reason || re.Sent != sent || re.Saved != saved {
		t.Fatalf("Run's refusal = %+v; want server %s, status %d, reason %q, sent %v, saved %q",
			*re, server, status, reason, sent, saved)
	}
}

// TestAgentStopsWhenRefused runs an agent without a credential against a
// server that requires one: Run returns the refusal at once, after one
// try, rather than reconnecting forever.
func TestAgentStopsWhenRefused(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	fs.refuse(http.StatusUnauthorized, auth.MsgAuthRequired)
	a, logs := newAgent(t, fs, nil)
	err := runUntil(t, a).ended(t)
	checkRefused(t, err, fs.srv.URL, http.StatusUnauthorized, auth.MsgAuthRequired, false, "")
	want := "agent: the server " + fs.srv.URL + " refused this agent, which has no credential (401): " + auth.MsgAuthRequired
	if err.Error() != want {
		t.Fatalf("Run: %q\nwant %q", err, want)
	}
	if n := fs.dialed(); n != 1 {
		t.Fatalf("the agent asked for its WebSocket %d times, want 1", n)
	}
	if strings.Contains(logs.String(), "reconnecting") {
		t.Fatalf("the agent logged a reconnection:\n%s", logs)
	}
}

// TestAgentStopsWhenItsCredentialIsRevoked runs an attempt on an agent
// whose saved credential the server then refuses (revoked): at its next
// connection Run returns the refusal, naming the file, and has stopped the
// attempt, as at any end of Run.
func TestAgentStopsWhenItsCredentialIsRevoked(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	dir := t.TempDir()
	if err := SaveCredential(dir, "credential-of-box"); err != nil {
		t.Fatal(err)
	}
	a, _ := newAgent(t, fs, func(c *Config) { c.DataDir = dir })
	r := runUntil(t, a)
	r.awaitRegistered(t, a)
	pidFile := filepath.Join(t.TempDir(), "pid")
	fs.assign(&wire.JobAssign{AttemptID: "a1", Command: []string{"sh", "-c", "echo $$ > " + pidFile + "; echo ready; exec sleep 1000"}})
	fs.output("a1", "ready")

	const revoked = "token 01JREVOKED was revoked"
	fs.refuse(http.StatusUnauthorized, revoked)
	fs.dropSession()
	checkRefused(t, r.ended(t), fs.srv.URL, http.StatusUnauthorized, revoked, true, filepath.Join(dir, "credential"))
	assertDead(t, pidsIn(t, pidFile)...)
}

// TestAgentTriesOtherServersWhenOneRefuses gives an agent two servers: the
// first refuses its credential (a standby that has not read a new
// credential yet), the second accepts it, and the agent registers there.
func TestAgentTriesOtherServersWhenOneRefuses(t *testing.T) {
	t.Parallel()
	stale, leader := newFakeServer(t), newFakeServer(t)
	stale.refuse(http.StatusUnauthorized, "token 01JNEW is not in the registry")
	startAgent(t, leader, func(c *Config) { c.Server = stale.srv.URL + "," + leader.srv.URL })
	if n := stale.dialed(); n != 1 {
		t.Fatalf("the refusing server got %d WebSocket requests, want 1", n)
	}
}

// TestAgentStopsWhenTheLeaderRefuses gives an agent a standby, which names
// the leader, and the leader, which refuses its credential (403: it may
// not speak the agent protocol): Run returns the leader's refusal.
func TestAgentStopsWhenTheLeaderRefuses(t *testing.T) {
	t.Parallel()
	standby, leader := newFakeServer(t), newFakeServer(t)
	standby.standBy(leader.srv.URL)
	const why = "alice (role user) may not GET /api/v1/agent: that needs an agent credential (berth agent --join-token) or admin"
	leader.refuse(http.StatusForbidden, why)
	a, _ := newAgent(t, standby, func(c *Config) { c.Server, c.Token = standby.srv.URL+","+leader.srv.URL, "token-of-alice" })
	checkRefused(t, runUntil(t, a).ended(t), leader.srv.URL, http.StatusForbidden, why, true, "")
	if s, l := standby.dialed(), leader.dialed(); s != 1 || l != 1 {
		t.Fatalf("WebSocket requests: standby %d, leader %d; want 1 each", s, l)
	}
}

func TestAgentKillsReassignedAttempts(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	fs.registerAck = func(n int, reg *wire.Register) *wire.Ack {
		if n == 2 { // after a reconnect: a2 runs elsewhere now
			return &wire.Ack{Keep: slices.DeleteFunc(slices.Clone(reg.Running), func(id string) bool { return id == "a2" }), Kill: []string{"a2"}}
		}
		return &wire.Ack{}
	}
	startAgent(t, fs, nil)
	sleep := []string{"sleep", "1000"}
	fs.assign(&wire.JobAssign{AttemptID: "a1", Command: sleep})
	fs.assign(&wire.JobAssign{AttemptID: "a2", Command: sleep})
	fs.assign(&wire.JobAssign{AttemptID: "a3", Command: sleep})

	fs.send(wire.TypeAck, &wire.Ack{Of: wire.AckHeartbeat, Kill: []string{"a1"}})
	checkResult(t, fs.result("a1"), berth.AttemptFailed, berth.CauseReassigned, intp(77), reassigned)

	fs.dropSession()
	checkResult(t, fs.result("a2"), berth.AttemptFailed, berth.CauseReassigned, intp(77), reassigned)
	fs.send(wire.TypeJobCancel, &wire.JobCancel{AttemptID: "a3", Reason: "cancelled by dave"})
	checkResult(t, fs.result("a3"), berth.AttemptCancelled, "", nil, "cancelled by dave")
}
