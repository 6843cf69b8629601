package devca

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// devServer starts an HTTPS test server with DevCA's certificate from dir.
func devServer(t *testing.T, dir string) (url, fingerprint string) {
	t.Helper()
	certFile, keyFile, fp, err := DevCA(dir, []string{"berth.example"})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "berth")
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL, fp
}

func get(t *testing.T, url string, cfg *tls.Config) error {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: cfg}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if string(body) != "berth" {
		t.Fatalf("body %q", body)
	}
	return nil
}

func TestDevCAFiles(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "tls")
	certFile, keyFile, fp, err := DevCA(dir, []string{"berth.example", "10.0.0.5", "BERTH.example", " "})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ca.pem", "ca.key", "server.pem", "server.key"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %o, want 600", name, fi.Mode().Perm())
		}
	}
	if certFile != filepath.Join(dir, "server.pem") || keyFile != filepath.Join(dir, "server.key") {
		t.Errorf("files %s, %s", certFile, keyFile)
	}
	ca := readCert(t, filepath.Join(dir, "ca.pem"))
	if !ca.IsCA || ca.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("CA: IsCA %v, algorithm %v", ca.IsCA, ca.PublicKeyAlgorithm)
	}
	if life := ca.NotAfter.Sub(ca.NotBefore); life < 9*365*24*time.Hour {
		t.Errorf("CA lifetime %v, want about 10 years", life)
	}
	if fp != Fingerprint(ca) || !strings.HasPrefix(fp, "sha256:") || len(fp) != len("sha256:")+64 || fp != strings.ToLower(fp) {
		t.Errorf("fingerprint %q", fp)
	}
	leaf := readCert(t, certFile)
	if err := leaf.CheckSignatureFrom(ca); err != nil {
		t.Errorf("server certificate not signed by the CA: %v", err)
	}
	if got, want := slices.Sorted(slices.Values(leaf.DNSNames)), []string{"berth.example", "localhost"}; !slices.Equal(got, want) {
		t.Errorf("DNS SANs %q, want %q", got, want)
	}
	var ips []string
	for _, ip := range leaf.IPAddresses {
		ips = append(ips, ip.String())
	}
	slices.Sort(ips)
	if want := []string{"10.0.0.5", "127.0.0.1", "::1"}; !slices.Equal(ips, want) {
		t.Errorf("IP SANs %q, want %q", ips, want)
	}
	if life := leaf.NotAfter.Sub(leaf.NotBefore); life > 366*24*time.Hour || life < 364*24*time.Hour {
		t.Errorf("server certificate lifetime %v, want a year", life)
	}
	if _, _, _, err := DevCA(dir, []string{"https://berth.example:7070"}); berth.ErrorCode(err) != berth.ECodeInvalid {
		t.Errorf("host with scheme and port: %v, want invalid", err)
	}
}

func TestDevCAReuseAndRegenerate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Now()
	certFile, _, fp1, err := devCA(dir, []string{"a.example"}, now)
	if err != nil {
		t.Fatal(err)
	}
	serial1 := readCert(t, certFile).SerialNumber

	_, _, fp2, err := devCA(dir, []string{"a.example"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if fp2 != fp1 {
		t.Error("second call made a new CA")
	}
	if readCert(t, certFile).SerialNumber.Cmp(serial1) != 0 {
		t.Error("second call with the same hosts made a new server certificate")
	}

	_, _, fp3, err := devCA(dir, []string{"a.example", "b.example"}, now)
	if err != nil {
		t.Fatal(err)
	}
	leaf := readCert(t, certFile)
	if fp3 != fp1 {
		t.Error("new hosts must not make a new CA")
	}
	if leaf.SerialNumber.Cmp(serial1) == 0 || !slices.Contains(leaf.DNSNames, "b.example") {
		t.Error("new hosts must make a new server certificate covering them")
	}
	serial2 := leaf.SerialNumber

	_, _, _, err = devCA(dir, []string{"a.example", "b.example"}, now.Add(300*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if readCert(t, certFile).SerialNumber.Cmp(serial2) != 0 {
		t.Error("a certificate with 65 days left was replaced")
	}
	_, _, fp4, err := devCA(dir, []string{"a.example", "b.example"}, now.Add(340*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if readCert(t, certFile).SerialNumber.Cmp(serial2) == 0 {
		t.Error("a certificate expiring within 30 days was kept")
	}
	if fp4 != fp1 {
		t.Error("renewing the server certificate must keep the CA")
	}

	if _, _, _, err := devCA(dir, nil, now.Add(11*365*24*time.Hour)); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("expired CA: %v, want an error saying so", err)
	}
	if err := os.Remove(filepath.Join(dir, "ca.key")); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := devCA(dir, nil, now); err == nil || !strings.Contains(err.Error(), "only one") {
		t.Errorf("CA without key: %v, want an error", err)
	}
}

func TestClientConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url, fp := devServer(t, dir)
	caFile := filepath.Join(dir, "ca.pem")
	otherDir := t.TempDir()
	_, _, otherFP, err := DevCA(otherDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	otherCA := filepath.Join(otherDir, "ca.pem")
	leafFP := Fingerprint(readCert(t, filepath.Join(dir, "server.pem")))
	hexOnly := strings.TrimPrefix(fp, "sha256:")
	var colons []string
	for i := 0; i < len(hexOnly); i += 2 {
		colons = append(colons, strings.ToUpper(hexOnly[i:i+2]))
	}

	tests := []struct {
		name        string
		ca, pin     string
		wantConnect bool
	}{
		{"CA file", caFile, "", true},
		{"CA fingerprint", "", fp, true},
		{"bare hex fingerprint", "", hexOnly, true},
		{"upper case with colons", "", "SHA256:" + strings.Join(colons, ":"), true},
		{"leaf fingerprint", "", leafFP, true},
		{"CA file and fingerprint", caFile, fp, true},
		{"wrong fingerprint", "", otherFP, false},
		{"different CA", otherCA, "", false},
		{"different CA, right fingerprint", otherCA, fp, false},
		{"right CA, wrong fingerprint", caFile, otherFP, false},
		{"system roots", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := ClientConfig(tt.ca, tt.pin)
			if err != nil {
				t.Fatal(err)
			}
			if tt.ca == "" && tt.pin == "" && cfg != nil {
				t.Fatal("neither CA nor fingerprint: want a nil config")
			}
			err = get(t, url, cfg)
			if tt.wantConnect && err != nil {
				t.Fatalf("want connected, got %v", err)
			}
			if !tt.wantConnect && err == nil {
				t.Fatal("want the connection refused")
			}
			t.Logf("connect: %v", err)
		})
	}
}

func TestClientConfigPinnedCAChecksLeaf(t *testing.T) {
	t.Parallel()
	// A server presenting the pinned CA next to a leaf the CA did not sign
	// must be refused: the pin alone is not enough.
	dir, otherDir := t.TempDir(), t.TempDir()
	_, _, fp, err := DevCA(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	otherCert, otherKey, _, err := DevCA(otherDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(otherCert, otherKey)
	if err != nil {
		t.Fatal(err)
	}
	pinnedCA := readCert(t, filepath.Join(dir, "ca.pem"))
	pair.Certificate = [][]byte{pair.Certificate[0], pinnedCA.Raw}
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	cfg, err := ClientConfig("", fp)
	if err != nil {
		t.Fatal(err)
	}
	if err := get(t, srv.URL, cfg); err == nil || !strings.Contains(err.Error(), "pinned") {
		t.Fatalf("want refused by the pin check, got %v", err)
	}
}

func TestClientConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, ca, pin, field string
	}{
		{"short fingerprint", "", "sha256:abcd", "--ca-fingerprint"},
		{"not hex", "", "sha256:" + strings.Repeat("zz", 32), "--ca-fingerprint"},
		{"other hash", "", "sha1:" + strings.Repeat("ab", 32), "--ca-fingerprint"},
		{"missing CA file", filepath.Join(dir, "nope.pem"), "", "--ca"},
		{"CA file not PEM", notPEM, "", "--ca"},
	}
	for _, tt := range tests {
		cfg, err := ClientConfig(tt.ca, tt.pin)
		var be *berth.Error
		if !errors.As(err, &be) || be.Code != berth.ECodeInvalid || be.Field != tt.field || cfg != nil {
			t.Errorf("%s: ClientConfig = %v, %v; want invalid %s", tt.name, cfg, err, tt.field)
		}
	}
}

func TestFingerprintOfPresentedChain(t *testing.T) {
	t.Parallel()
	// The fingerprint DevCA reports is the one a client sees on the wire.
	dir := t.TempDir()
	url, fp := devServer(t, dir)
	conn, err := tls.Dial("tcp", strings.TrimPrefix(url, "https://"), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var seen []string
	for _, c := range conn.ConnectionState().PeerCertificates {
		seen = append(seen, Fingerprint(c))
	}
	if !slices.Contains(seen, fp) {
		t.Errorf("presented chain %q lacks the CA fingerprint %s", seen, fp)
	}
}
