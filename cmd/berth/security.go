package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/audit"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/devca"
)

// securityConfig is how a server admits requests and keeps its keys and
// audit log. Zero values take the defaults.
type securityConfig struct {
	KeyFile       string // "": DATA-DIR/berth.key
	AuditLog      string // "": DATA-DIR/audit.log
	TrustLoopback string // role given to direct loopback clients; "": admin; "none": no one
	Allow         []auth.CIDRRule
	RateLimit     float64 // requests per second per identity; 0: no limit
	TLSCert       string
	TLSKey        string
	TLSSelfSigned bool // a development CA in DATA-DIR/tls
}

func addSecurityFlags(fs *flag.FlagSet, sc *securityConfig) {
	fs.StringVar(&sc.KeyFile, "key-file", "", "the server's master key (signs tokens, seals secrets), created on first start;\nservers sharing a store must share it (default DATA-DIR/berth.key)")
	fs.StringVar(&sc.AuditLog, "audit-log", "", "the hash-chained audit log (default DATA-DIR/audit.log)")
	fs.StringVar(&sc.TrustLoopback, "trust-loopback", "admin", "role of clients on this machine that connect directly (loopback, no X-Forwarded-For)\nwithout a token; none: they need a token too")
	fs.Func("allow", "CIDR=ROLE: clients from CIDR without a token get ROLE, e.g. 10.0.0.0/8=viewer (repeatable)", func(v string) error {
		rule, err := auth.ParseCIDRRule(v)
		if err != nil {
			return err
		}
		sc.Allow = append(sc.Allow, rule)
		return nil
	})
	fs.Float64Var(&sc.RateLimit, "rate-limit", 100, "requests per second each identity may make (bursts of twice that); 0: no limit")
	fs.StringVar(&sc.TLSCert, "tls-cert", "", "serve HTTPS with this certificate (PEM; with --tls-key)")
	fs.StringVar(&sc.TLSKey, "tls-key", "", "the private key of --tls-cert (PEM)")
	fs.BoolVar(&sc.TLSSelfSigned, "tls-self-signed", false, "serve HTTPS with a certificate from a development CA made in DATA-DIR/tls;\nclients pin the CA with --ca DATA-DIR/tls/ca.pem or the fingerprint printed at start")
}

// check validates the flags without touching anything.
func (sc *securityConfig) check() error {
	switch {
	case sc.RateLimit < 0:
		return berth.Invalidf("--rate-limit", "must not be negative")
	case (sc.TLSCert == "") != (sc.TLSKey == ""):
		return berth.Invalidf("--tls-cert", "--tls-cert and --tls-key go together")
	case sc.TLSSelfSigned && sc.TLSCert != "":
		return berth.Invalidf("--tls-self-signed", "use either --tls-self-signed or --tls-cert/--tls-key")
	}
	if sc.TrustLoopback != "" && sc.TrustLoopback != "none" {
		if _, err := auth.ParseRole(sc.TrustLoopback); err != nil {
			return berth.Invalidf("--trust-loopback", "%q: want none or a role (viewer, user, operator, admin)", sc.TrustLoopback)
		}
	}
	return nil
}

func (sc *securityConfig) trustLoopback() auth.Role {
	switch sc.TrustLoopback {
	case "":
		return auth.RoleAdmin
	case "none":
		return ""
	}
	return auth.Role(sc.TrustLoopback)
}

// serverTLS returns the TLS configuration to serve with, nil for plain
// HTTP; with --tls-self-signed also the development CA's file and
// fingerprint.
func (sc *securityConfig) serverTLS(dataDir string, hosts []string) (cfg *tls.Config, caFile, fingerprint string, err error) {
	cert, key := sc.TLSCert, sc.TLSKey
	if sc.TLSSelfSigned {
		dir := filepath.Join(dataDir, "tls")
		if cert, key, fingerprint, err = devca.DevCA(dir, hosts); err != nil {
			return nil, "", "", fmt.Errorf("development CA: %w", err)
		}
		caFile = filepath.Join(dir, "ca.pem")
	}
	if cert == "" {
		return nil, "", "", nil
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, "", "", &berth.Error{Code: berth.ECodeInvalid, Field: "--tls-cert", Err: err}
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, caFile, fingerprint, nil
}

// security is a server's admission, keys and audit log.
type security struct {
	keys      *auth.Keys
	audit     *audit.Log
	auditPath string // the audit log's file, for the dashboard
	cfg       *securityConfig
}

// openSecurity loads (or creates) the master key and opens the audit log.
func openSecurity(dataDir string, sc *securityConfig) (*security, error) {
	keyFile, auditLog := sc.KeyFile, sc.AuditLog
	if keyFile == "" {
		keyFile = filepath.Join(dataDir, "berth.key")
	}
	if auditLog == "" {
		auditLog = filepath.Join(dataDir, "audit.log")
	}
	keys, err := auth.LoadOrCreateKey(keyFile)
	if err != nil {
		return nil, err
	}
	log, err := audit.Open(auditLog, audit.Options{Key: keys.AuditKey()})
	if err != nil {
		return nil, err
	}
	return &security{keys: keys, audit: log, auditPath: auditLog, cfg: sc}, nil
}

// api returns the API's security over registry reg and vault v (nil on a
// standby).
func (s *security) api(reg *auth.Registry, v *auth.Vault) *api.Security {
	sec := &api.Security{
		Ingress: &auth.Ingress{TrustLoopback: s.cfg.trustLoopback(), Allow: s.cfg.Allow, Keys: s.keys, Tokens: reg},
		Tokens:  reg, Secrets: v, Audit: s.audit,
	}
	if s.cfg.RateLimit > 0 {
		sec.Limiter = auth.NewLimiter(s.cfg.RateLimit, int(2*s.cfg.RateLimit)+1, nil)
	}
	return sec
}

// adminTokenFile is where the first admin token is saved, in the data dir.
const adminTokenFile = "admin.token"

// bootstrap issues the first admin token when the registry is empty (the
// store's first start) and saves it in the data dir, mode 0600; it returns
// the token, or "" when the registry had tokens already.
func (s *security) bootstrap(ctx context.Context, reg *auth.Registry, dataDir string) (string, error) {
	if len(reg.List()) > 0 {
		return "", nil
	}
	issued, err := reg.Issue(ctx, auth.Grant{Name: "admin", Role: auth.RoleAdmin, By: "berth"}, func(t *berth.Token) error {
		return s.audit.Append(audit.Entry{Action: "token.created", Actor: "berth", Target: "token/" + t.ID,
			Fields: map[string]string{"name": t.Name, "role": t.Role, "why": "first start: the first admin token"}})
	})
	if err != nil {
		return "", fmt.Errorf("first admin token: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dataDir, adminTokenFile), []byte(issued.Secret+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("save the first admin token: %w", err)
	}
	return issued.Secret, nil
}

// recordStart appends the server's configuration to the audit log.
func (s *security) recordStart(cfg *serverConfig, url string) error {
	allow := make([]string, len(s.cfg.Allow))
	for i, r := range s.cfg.Allow {
		allow[i] = r.Net.String() + "=" + string(r.Role)
	}
	trust := string(s.cfg.trustLoopback())
	if trust == "" {
		trust = "none"
	}
	return s.audit.Append(audit.Entry{Action: "server.started", Actor: "berth", Target: "server/" + url,
		Fields: map[string]string{"listen": cfg.Listen, "store": storeKind(cfg.Store), "trust_loopback": trust,
			"allow": strings.Join(allow, ","), "rate_limit": fmt.Sprint(s.cfg.RateLimit),
			"tls": fmt.Sprint(strings.HasPrefix(url, "https://"))}})
}

// loopbackAddr reports whether a listen address binds loopback only.
func loopbackAddr(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkExposure refuses to serve beyond loopback when no one but loopback
// clients could get in: no live token and no --allow rule.
func checkExposure(listen string, reg *auth.Registry, sc *securityConfig) error {
	host, _, _ := net.SplitHostPort(listen)
	if loopbackAddr(host) || len(sc.Allow) > 0 || reg.Live() {
		return nil
	}
	return berth.Invalidf("--listen", "%q is not a loopback address and no authentication is configured (no live token, no --allow rule); "+
		"start on loopback and run berth token create, or add --allow CIDR=ROLE", listen)
}
