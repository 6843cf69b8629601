// Package devca is Berth's development-mode TLS: a certificate authority
// made once in the server's data dir, the server certificate it signs, and
// the client configuration that trusts it, by CA file or by a pinned
// fingerprint.
package devca

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/berth-dev/berth"
)

// Development CA file names inside DevCA's directory.
const (
	devCAFile     = "ca.pem"
	devCAKeyFile  = "ca.key"
	devCertFile   = "server.pem"
	devKeyFile    = "server.key"
	caLifetime    = 10 * 365 * 24 * time.Hour
	certLifetime  = 365 * 24 * time.Hour
	certRenewSoon = 30 * 24 * time.Hour
)

// DevCA prepares development-mode TLS in dir: a self-signed ECDSA P-256 CA
// valid 10 years (ca.pem, ca.key), created once and reused, and a server
// certificate signed by it valid 1 year (server.pem holding the server
// certificate followed by the CA's, server.key), for every name in hosts
// plus localhost, 127.0.0.1 and ::1 (addresses as IP SANs). The server
// certificate is made again when the names it covers differ from those
// asked for, it expires within 30 days, or it does not verify against the
// CA. It returns the server certificate and key files, for
// tls.LoadX509KeyPair, and the CA's Fingerprint, for clients to pin. All
// files are mode 0600 and dir is created mode 0700. It returns a
// berth.Invalidf("hosts", ...) error for a host that is neither an address
// nor a DNS name, and an error naming the file when one exists but is
// unreadable or invalid, when only one of ca.pem and ca.key exists, or when
// the CA has expired (delete both to make a new CA; pinned clients must then
// be given the new fingerprint).
func DevCA(dir string, hosts []string) (certFile, keyFile, fingerprint string, err error) {
	return devCA(dir, hosts, time.Now())
}

func devCA(dir string, hosts []string, now time.Time) (certFile, keyFile, fingerprint string, err error) {
	dnsNames, ips, err := sanList(hosts)
	if err != nil {
		return "", "", "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", "", fmt.Errorf("dev CA: %w", err)
	}
	ca, caKey, err := loadOrCreateCA(dir, now)
	if err != nil {
		return "", "", "", err
	}
	certFile = filepath.Join(dir, devCertFile)
	keyFile = filepath.Join(dir, devKeyFile)
	if !serverCertCurrent(certFile, keyFile, ca, dnsNames, ips, now) {
		if err := createServerCert(certFile, keyFile, ca, caKey, dnsNames, ips, now); err != nil {
			return "", "", "", err
		}
	}
	return certFile, keyFile, Fingerprint(ca), nil
}

// sanList splits hosts, plus the loopback names, into sorted, distinct DNS
// names and IP addresses.
func sanList(hosts []string) ([]string, []net.IP, error) {
	dns := []string{"localhost"}
	ipStrs := []string{"127.0.0.1", "::1"}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			ipStrs = append(ipStrs, ip.String())
			continue
		}
		if !validDNSName(h) {
			return nil, nil, berth.Invalidf("hosts", "%q is neither an IP address nor a DNS name (no ports or schemes)", h)
		}
		dns = append(dns, strings.ToLower(strings.TrimSuffix(h, ".")))
	}
	slices.Sort(dns)
	dns = slices.Compact(dns)
	slices.Sort(ipStrs)
	ipStrs = slices.Compact(ipStrs)
	ips := make([]net.IP, len(ipStrs))
	for i, s := range ipStrs {
		ips[i] = net.ParseIP(s)
	}
	return dns, ips, nil
}

func validDNSName(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '*' && len(label) == 1
			if !ok {
				return false
			}
		}
	}
	return true
}

func loadOrCreateCA(dir string, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPath := filepath.Join(dir, devCAFile)
	keyPath := filepath.Join(dir, devCAKeyFile)
	_, certErr := os.Stat(certPath)
	_, keyErr := os.Stat(keyPath)
	certMissing, keyMissing := errors.Is(certErr, fs.ErrNotExist), errors.Is(keyErr, fs.ErrNotExist)
	switch {
	case certMissing && keyMissing:
		return createCA(certPath, keyPath, now)
	case certMissing || keyMissing:
		return nil, nil, fmt.Errorf("dev CA in %s: only one of %s and %s exists; delete it to make a new CA", dir, devCAFile, devCAKeyFile)
	}
	cert, key, err := loadPair(certPath, keyPath)
	if err != nil {
		return nil, nil, fmt.Errorf("dev CA: %w (delete %s and %s to make a new CA)", err, certPath, keyPath)
	}
	if !cert.IsCA {
		return nil, nil, fmt.Errorf("dev CA: %s is not a CA certificate (delete it and %s to make a new CA)", certPath, keyPath)
	}
	if now.After(cert.NotAfter) {
		return nil, nil, fmt.Errorf("dev CA: %s expired on %s (delete it and %s to make a new CA)", certPath, cert.NotAfter.Format(time.DateOnly), keyPath)
	}
	return cert, key, nil
}

// loadPair reads a PEM certificate file (the first certificate is returned)
// and a PEM PKCS#8 ECDSA key file, and checks that they match.
func loadPair(certPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, err
	}
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, nil, fmt.Errorf("%s holds no PEM certificate", certPath)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", certPath, err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil || kb.Type != "PRIVATE KEY" {
		return nil, nil, fmt.Errorf("%s holds no PEM private key", keyPath)
	}
	anyKey, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	key, ok := anyKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("%s: not an ECDSA key", keyPath)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, nil, fmt.Errorf("%s does not match %s", keyPath, certPath)
	}
	return cert, key, nil
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func createCA(certPath, keyPath string, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("dev CA: generate key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, fmt.Errorf("dev CA: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "Berth development CA", Organization: []string{"Berth"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("dev CA: create certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("dev CA: %w", err)
	}
	// The key first: a certificate without its key is refused on reuse.
	if err := writeKeyPEM(keyPath, key); err != nil {
		return nil, nil, err
	}
	if err := writeFileAtomic(certPath, pemCert(der)); err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

func serverCertCurrent(certPath, keyPath string, ca *x509.Certificate, dns []string, ips []net.IP, now time.Time) bool {
	cert, _, err := loadPair(certPath, keyPath)
	if err != nil {
		return false
	}
	if cert.CheckSignatureFrom(ca) != nil || now.Add(certRenewSoon).After(cert.NotAfter) || now.Before(cert.NotBefore) {
		return false
	}
	haveDNS := slices.Clone(cert.DNSNames)
	slices.Sort(haveDNS)
	if !slices.Equal(haveDNS, dns) {
		return false
	}
	have := make([]string, len(cert.IPAddresses))
	for i, ip := range cert.IPAddresses {
		have[i] = ip.String()
	}
	slices.Sort(have)
	want := make([]string, len(ips))
	for i, ip := range ips {
		want[i] = ip.String()
	}
	return slices.Equal(have, want)
}

func createServerCert(certPath, keyPath string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, dns []string, ips []net.IP, now time.Time) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("dev CA: generate server key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return fmt.Errorf("dev CA: %w", err)
	}
	notAfter := now.Add(certLifetime)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: dns[0], Organization: []string{"Berth"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("dev CA: create server certificate: %w", err)
	}
	if err := writeKeyPEM(keyPath, key); err != nil {
		return err
	}
	return writeFileAtomic(certPath, append(pemCert(der), pemCert(ca.Raw)...))
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func writeKeyPEM(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("dev CA: encode key: %w", err)
	}
	return writeFileAtomic(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}

// writeFileAtomic writes data to path, mode 0600, through a temporary file
// renamed into place.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("dev CA: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.Write(data)
	if werr == nil {
		werr = tmp.Chmod(0o600)
	}
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("dev CA: write %s: %w", path, werr)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("dev CA: %w", err)
	}
	return nil
}

// Fingerprint returns "sha256:" and the lowercase hex SHA-256 of cert's DER.
// It never fails.
func Fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// parseFingerprint accepts "sha256:HEX" or bare HEX, colons allowed, any case.
func parseFingerprint(s string) ([]byte, error) {
	t := strings.TrimSpace(s)
	if len(t) >= 7 && strings.EqualFold(t[:7], "sha256:") {
		t = t[7:]
	}
	t = strings.ReplaceAll(t, ":", "")
	b, err := hex.DecodeString(t)
	if err != nil || len(b) != sha256.Size {
		return nil, berth.Invalidf("--ca-fingerprint", "%q: want sha256: followed by 64 hex digits (colons allowed), as berth prints it", s)
	}
	return b, nil
}

// ClientConfig returns the TLS configuration for a client of a Berth server.
// With caFile, the server must present a chain that verifies, for the name
// dialled, against the PEM certificates in caFile. With fingerprint
// ("sha256:HEX" or bare hex, colons allowed, any case) the presented chain
// must hold the certificate with that SHA-256 fingerprint, and either that
// certificate is the leaf or the leaf verifies against it as a root (the
// name dialled is not checked: the pin identifies the server). With both,
// both must hold. With neither it returns nil, nil: the system roots apply.
// It returns a berth.Invalidf("--ca-fingerprint", ...) error for a malformed
// fingerprint and a berth.Invalidf("--ca", ...) error for an unreadable CA
// file or one holding no PEM certificate.
func ClientConfig(caFile, fingerprint string) (*tls.Config, error) {
	if caFile == "" && fingerprint == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	var roots *x509.CertPool
	if caFile != "" {
		data, err := os.ReadFile(caFile)
		if err != nil {
			return nil, berth.Invalidf("--ca", "read CA file").WithCause(err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(data) {
			return nil, berth.Invalidf("--ca", "%s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = roots
	}
	if fingerprint == "" {
		return cfg, nil
	}
	pin, err := parseFingerprint(fingerprint)
	if err != nil {
		return nil, err
	}
	// Verification is done by hand below, by VerifyConnection, which also
	// runs on resumed sessions.
	cfg.InsecureSkipVerify = true
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		return verifyPinned(cs, roots, pin)
	}
	return cfg, nil
}

func verifyPinned(cs tls.ConnectionState, roots *x509.CertPool, pin []byte) error {
	certs := cs.PeerCertificates
	if len(certs) == 0 {
		return errors.New("server presented no certificate")
	}
	leaf := certs[0]
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if roots != nil {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: cs.ServerName, Roots: roots, Intermediates: inter}); err != nil {
			return fmt.Errorf("server certificate does not verify against the CA file: %w", err)
		}
	}
	for i, c := range certs {
		sum := sha256.Sum256(c.Raw)
		if !bytes.Equal(sum[:], pin) {
			continue
		}
		if i == 0 {
			return nil
		}
		pinned := x509.NewCertPool()
		pinned.AddCert(c)
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pinned, Intermediates: inter}); err != nil {
			return fmt.Errorf("server certificate does not verify against the pinned certificate: %w", err)
		}
		return nil
	}
	return errors.New("server certificate does not match the pinned fingerprint (--ca-fingerprint)")
}
