package berth

import (
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ValidPeerName reports whether s may name a federation peer: the same
// rule as a queue name (lowercase letters, digits, - and _).
func ValidPeerName(s string) bool { return queueRe.MatchString(s) }

// SetDefaults fills the timeouts p leaves out (DefaultRouteTimeout,
// DefaultLostTimeout).
func (p *Peer) SetDefaults() {
	if p.RouteTimeout == 0 {
		p.RouteTimeout = Duration(DefaultRouteTimeout)
	}
	if p.LostTimeout == 0 {
		p.LostTimeout = Duration(DefaultLostTimeout)
	}
}

// Validate checks everything of p but its token, which only the server
// knows to require (on create) or keep (on update): the name, the URL
// (http or https, a host and a port, no path beyond /, no query, fragment
// or user), the pinned fingerprint ("sha256:" and 64 hex digits, or none)
// and the timeouts (each > 0, route below lost). Its error names the
// field; call SetDefaults first.
func (p *Peer) Validate() error {
	if !ValidPeerName(p.Name) {
		return Invalidf("name", "%q: must be 1–63 lowercase letters, digits, - or _, starting with a letter or digit", p.Name)
	}
	if err := validPeerURL(p.URL); err != nil {
		return err
	}
	if p.CAFingerprint != "" && !validFingerprint(p.CAFingerprint) {
		return Invalidf("ca_fingerprint", "%q: want sha256: followed by 64 hex digits, as berth server prints it", p.CAFingerprint)
	}
	if len(p.Token) > 4096 {
		return Invalidf("token", "must be at most 4096 bytes")
	}
	switch {
	case p.RouteTimeout <= 0:
		return Invalidf("route_timeout", "must be more than 0")
	case p.LostTimeout <= 0:
		return Invalidf("lost_timeout", "must be more than 0")
	case p.RouteTimeout >= p.LostTimeout:
		return Invalidf("route_timeout", "%s must be less than lost_timeout %s", time.Duration(p.RouteTimeout), time.Duration(p.LostTimeout))
	}
	return nil
}

// validPeerURL checks a peer's URL: http(s)://HOST:PORT, optionally
// followed by a lone /.
func validPeerURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case s == "":
		return Invalidf("url", "is required: the peer's API, e.g. https://b.example:7070")
	case err != nil:
		return Invalidf("url", "%q is not a URL", s)
	case u.Scheme != "http" && u.Scheme != "https":
		return Invalidf("url", "%q: must start with https:// or http://", s)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery || strings.Contains(s, "#"):
		return Invalidf("url", "%q: must have no user, query or fragment", s)
	case u.Path != "" && u.Path != "/":
		return Invalidf("url", "%q: must have no path (the peer's API is found under it)", s)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || host == "" {
		return Invalidf("url", "%q: must name a host and a port, e.g. https://b.example:7070", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return Invalidf("url", "%q: port must be 1–65535", s)
	}
	return nil
}

// validFingerprint reports whether s is "sha256:" and 64 hex digits.
func validFingerprint(s string) bool {
	hexPart, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(hexPart) != 64 {
		return false
	}
	_, err := hex.DecodeString(hexPart)
	return err == nil
}

// PeerList is the body of GET /api/v1/peers: every peer, by name, with
// its live status.
type PeerList struct {
	Peers []*PeerInfo `json:"peers"`
}

// Summary says a peer's GPUs by model, free now of the total, in the order
// each model first appears: "H100 6/8, A100 0/4" ("" for none). A
// worker that takes no new work counts none free; a worker's free GPUs
// go to its models in turn.
func (c *PeerCapacity) Summary() string {
	if c == nil {
		return ""
	}
	type kind struct {
		model       string
		free, total int
	}
	var kinds []*kind
	for _, w := range c.Workers {
		free := w.FreeGPUs
		if w.Off {
			free = 0
		}
		for _, k := range GPUKinds(w.GPUs) {
			i := slices.IndexFunc(kinds, func(s *kind) bool { return s.model == k.Model })
			if i < 0 {
				i = len(kinds)
				kinds = append(kinds, &kind{model: k.Model})
			}
			n := min(max(free, 0), k.Count)
			kinds[i].free += n
			kinds[i].total += k.Count
			free -= n
		}
	}
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s %d/%d", k.model, k.free, k.total)
	}
	return strings.Join(parts, ", ")
}
