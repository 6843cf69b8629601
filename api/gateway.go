package api

import (
	"net"
	"net/http"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/gateway"
)

// GatewayCaller authenticates a request to the inference gateway as the
// API does (a Berth token as the API key; loopback trust and address
// rules too) and returns its caller with its token's model allow-list and
// rate limit: the gateway's Config.Authenticate. Users, operators and
// admins may call models; refused keys count against the address's rate
// limit, as the API's do.
func (s *Server) GatewayCaller(r *http.Request) (*gateway.Caller, error) {
	id, err := s.sec.Ingress.Authenticate(r)
	if err != nil {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		if s.sec.Limiter != nil {
			if ok, _ := s.sec.Limiter.Allow("refused:" + host); !ok {
				return nil, berth.Errorf(berth.ECodeUnauthorized, "too many refused keys from %s; retry later", host)
			}
		}
		return nil, err
	}
	if !id.CanSubmit() {
		return nil, berth.Errorf(berth.ECodeForbidden, "%s (role %s) may not call models: that needs a user, operator or admin token", id.Name, id.Role)
	}
	c := &gateway.Caller{Name: id.Name, TokenID: id.TokenID}
	if id.TokenID != "" && s.sec.Tokens != nil {
		if t := s.sec.Tokens.Token(id.TokenID); t != nil {
			c.Models, c.RPM = t.Models, t.RPM
		}
	}
	return c, nil
}
