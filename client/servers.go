package client

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/berth-dev/berth"
)

// Servers is the list of URLs of the servers of one control plane, of
// which one at a time (the leader) serves; it remembers which answered
// last. It is safe for concurrent use.
type Servers struct {
	urls []string
	last atomic.Int64 // index in urls of the server that answered last
}

// ParseServers returns the servers of list: one URL or several,
// comma-separated. It trims spaces and trailing slashes and checks
// nothing else.
func ParseServers(list string) *Servers {
	s := &Servers{}
	for _, u := range strings.Split(list, ",") {
		s.urls = append(s.urls, strings.TrimSuffix(strings.TrimSpace(u), "/"))
	}
	return s
}

// URLs returns the servers' URLs in list order.
func (s *Servers) URLs() []string { return slices.Clone(s.urls) }

// Round starts one try of each server, the one that answered last first.
func (s *Servers) Round() *Round {
	return &Round{s: s, tried: make([]bool, len(s.urls)), at: -1}
}

// Round is one try of each of a list's servers, in the order Next says.
type Round struct {
	s     *Servers
	tried []bool
	at    int // index of the server Next returned last; -1 before
}

// Next returns the server to try now: first the one that answered last;
// after that the leader the server just tried named (leader), when it is
// in the list and not tried yet, else the next server not tried yet in
// list order. ok is false once every server has been tried.
func (r *Round) Next(leader string) (url string, ok bool) {
	next := -1
	n := len(r.s.urls)
	if r.at < 0 {
		next = int(r.s.last.Load())
	} else if i := slices.Index(r.s.urls, strings.TrimSuffix(leader, "/")); leader != "" && i >= 0 && !r.tried[i] {
		next = i
	} else {
		for k := 1; k < n && next < 0; k++ {
			if i := (r.at + k) % n; !r.tried[i] {
				next = i
			}
		}
	}
	if next < 0 {
		return "", false
	}
	r.at, r.tried[next] = next, true
	return r.s.urls[next], true
}

// Answered records that the server Next returned last answered, so that
// the next round starts with it.
func (r *Round) Answered() { r.s.last.Store(int64(r.at)) }

// Failed returns the error of a round in which no server answered, given
// the last server's error: that error itself when there is one server,
// else one naming every server and ending with it. A server's
// *berth.Error stays one, with its code.
func (r *Round) Failed(last error) error {
	if len(r.s.urls) == 1 {
		return last
	}
	prefix := "no server of " + strings.Join(r.s.urls, ", ") + " answered: "
	var be *berth.Error
	if errors.As(last, &be) {
		return &berth.Error{Code: be.Code, Message: prefix + be.Message, Field: be.Field}
	}
	return fmt.Errorf("%s%w", prefix, last)
}

// standbyLeader reports whether resp, whose error is err, is a standby's
// refusal and returns the leader it names ("" when none).
func standbyLeader(resp *http.Response, err error) (leader string, standby bool) {
	if resp.StatusCode != http.StatusServiceUnavailable {
		return "", false
	}
	if _, named := resp.Header[berth.LeaderHeader]; named {
		return resp.Header.Get(berth.LeaderHeader), true
	}
	var be *berth.Error
	return "", errors.As(err, &be) && strings.Contains(be.Message, "standby")
}
