// Package kubetest runs a real Kubernetes control plane for tests: etcd and
// kube-apiserver on loopback, in the test's temporary directory, stopped
// when the test ends; and, on request, kwok, which plays the kubelet for
// the fake nodes a test registers. There is no kubelet, scheduler or
// controller-manager: a test registers Node objects with the capacity it
// wants (nvidia.com/gpu among it), binds pods itself (spec.nodeName or the
// binding subresource) and sets their status through the status
// subresource, or leaves the last two to kwok. Namespaces, once deleted,
// stay Terminating (no controller-manager finalizes them).
//
// The binaries are built from the Go module proxy by .ci/k8s-bins, once per
// machine, into a cache outside the checkout (BinDir). Where they are
// absent the tests that need them fail, naming that script: CI builds them.
//
// The package itself does not import client-go: a Server is its address,
// CA and token, which a test turns into a client-go rest.Config.
package kubetest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/freeport"
)

// Version is the Kubernetes release of the binaries kubetest runs, the one
// .ci/k8s-bins builds.
const Version = "v1.37.2"

// BinsEnv names the environment variable that overrides BinDir's default,
// as it does .ci/k8s-bins's.
const BinsEnv = "BERTH_K8S_BINS"

// KwokNodeAnnotation is the annotation (with the value "fake") that marks
// a Node for kwok to manage once StartKwok has started it; a pod bound to
// such a node must tolerate the taint of the same key.
const KwokNodeAnnotation = "kwok.x-k8s.io/node"

// readyTimeout bounds the wait for /readyz: about 3 s on an idle machine,
// many times that on a loaded two-core one.
const readyTimeout = 3 * time.Minute

// BinDir returns the directory holding kube-apiserver, etcd, kwok and
// kwok-stages.yaml: $BERTH_K8S_BINS, else berth-k8s/Version under the
// user's cache directory ($XDG_CACHE_HOME or ~/.cache), as .ci/k8s-bins
// fills it.
func BinDir() (string, error) {
	if dir := os.Getenv(BinsEnv); dir != "" {
		return dir, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("kubetest: %w", err)
	}
	return filepath.Join(cache, "berth-k8s", Version), nil
}

// bin returns the path of the binary name in BinDir, failing t, with the
// script to run, when it is not there.
func bin(t testing.TB, name string) string {
	t.Helper()
	dir, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("kubetest: no %s in %s (%v): run .ci/k8s-bins from the repository root to build kube-apiserver and etcd %s and kwok "+
			"from the Go module proxy (minutes, once per machine; %s overrides the directory)", name, dir, err, Version, BinsEnv)
	}
	return path
}

// Server is a running kube-apiserver, with its etcd.
type Server struct {
	// URL is the API server's address, https://127.0.0.1:PORT.
	URL string
	// Token is a bearer token of the group system:masters: it may do
	// anything.
	Token string
	// CA is the PEM certificate that the server's TLS certificate is
	// signed by, for a client's root CAs.
	CA []byte
	// CAFile is a file holding CA.
	CAFile string
	// Kubeconfig is a kubeconfig file naming the server, CAFile and Token
	// in its one context, "kubetest", the current one.
	Kubeconfig string

	dir string // the test's temporary directory, logs included
}

// Start starts etcd and kube-apiserver on free loopback ports and returns
// once the API server's /readyz answers ok; both are stopped, and their
// logs shown if t failed, when t ends. It fails t when the binaries are
// absent (see BinDir) or the server does not become ready.
func Start(t testing.TB) *Server {
	t.Helper()
	etcdBin, apiBin := bin(t, "etcd"), bin(t, "kube-apiserver")
	s := &Server{dir: t.TempDir(), Token: rand.Text()}
	s.CAFile = filepath.Join(s.dir, "ca.crt")
	keyFile, saKeyFile := filepath.Join(s.dir, "apiserver.key"), filepath.Join(s.dir, "sa.key")
	var err error
	if s.CA, err = writeServingCert(s.CAFile, keyFile); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	if err := writeECKey(saKeyFile); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	tokens := filepath.Join(s.dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(s.Token+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.CA)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()

	// A port chosen free may be taken before etcd or the API server binds
	// it: then all three are chosen again.
	for try := 1; ; try++ {
		ports, err := freeport.Ports(3)
		if err != nil {
			t.Fatalf("kubetest: %v", err)
		}
		etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
		peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
		s.URL = "https://127.0.0.1:" + strconv.Itoa(ports[2])
		etcd := start(t, s.dir, fmt.Sprintf("etcd-%d", try), etcdBin,
			"--name=kubetest", "--data-dir="+filepath.Join(s.dir, fmt.Sprintf("etcd-%d.data", try)),
			"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
			"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
			"--initial-cluster=kubetest="+peerURL, "--unsafe-no-fsync", "--log-level=warn")
		api := start(t, s.dir, fmt.Sprintf("kube-apiserver-%d", try), apiBin,
			"--etcd-servers="+etcdURL,
			"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(ports[2]),
			"--cert-dir="+filepath.Join(s.dir, "certs"), "--tls-cert-file="+s.CAFile, "--tls-private-key-file="+keyFile,
			"--token-auth-file="+tokens, "--authorization-mode=RBAC",
			"--service-account-issuer="+s.URL, "--service-account-key-file="+saKeyFile,
			"--service-account-signing-key-file="+saKeyFile,
			"--service-cluster-ip-range=10.0.0.0/24", "--allow-privileged=true",
			"--disable-admission-plugins=ServiceAccount",
			// 1.37 refuses to reconcile the kubernetes service's endpoints
			// to a loopback address.
			"--endpoint-reconciler-type=none")
		err = waitReady(client, s.URL+"/readyz", s.Token, etcd, api)
		if err == nil {
			break
		}
		etcd.stop()
		api.stop()
		if !etcd.bindFailed() && !api.bindFailed() || try == 3 {
			t.Fatalf("kubetest: %v\n%s\n%s", err, etcd.tail(), api.tail())
		}
	}
	s.Kubeconfig = filepath.Join(s.dir, "kubeconfig")
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: kubetest, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: admin, user: {token: %q}}]
contexts: [{name: kubetest, context: {cluster: kubetest, user: admin}}]
current-context: kubetest
`, s.URL, s.CAFile, s.Token)
	if err := os.WriteFile(s.Kubeconfig, []byte(kubeconfig), 0o600); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	return s
}

// StartKwok starts kwok against s, stopped when t ends: it manages the
// nodes annotated KwokNodeAnnotation=fake (Ready in a fraction of a
// second, heartbeats), runs the pods bound to them (Running once bound),
// completes those a Job owns and finalizes deleted ones. It returns once
// kwok runs; what it does to the nodes and pods is for the test to watch.
func (s *Server) StartKwok(t testing.TB) {
	t.Helper()
	kwok, stages := bin(t, "kwok"), bin(t, "kwok-stages.yaml")
	for try := 1; ; try++ {
		ports, err := freeport.Ports(1)
		if err != nil {
			t.Fatalf("kubetest: %v", err)
		}
		p := start(t, s.dir, fmt.Sprintf("kwok-%d", try), kwok,
			"--kubeconfig="+s.Kubeconfig, "--config="+stages,
			"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector="+KwokNodeAnnotation+"=fake",
			"--node-ip=127.0.0.1", "--cidr=10.244.0.0/16", "--server-address=127.0.0.1:"+strconv.Itoa(ports[0]))
		// kwok has nothing to poll for readiness but its own server's
		// port, which it binds once it has set up its controllers.
		err = waitListening(fmt.Sprintf("127.0.0.1:%d", ports[0]), p)
		if err == nil {
			return
		}
		p.stop()
		if !p.bindFailed() || try == 3 {
			t.Fatalf("kubetest: %v\n%s", err, p.tail())
		}
	}
}

// proc is a process of the control plane.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    string        // its stdout and stderr
	exited chan struct{} // closed once it has exited and been reaped
}

// start starts name (bin with args) in its own process group, its output
// to dir/name.log, and registers its stop with t: cleanups run last
// registered first, so the API server stops before its etcd.
func start(t testing.TB, dir, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, log: filepath.Join(dir, name+".log"), exited: make(chan struct{})}
	log, err := os.Create(p.log)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	defer log.Close()
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("kubetest: start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait() // its end is seen through exited; how, in its log
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Log(p.tail())
		}
	})
	return p
}

// stop sends the process SIGTERM and, if it is still running 10 s later,
// SIGKILL, and returns once it has exited. Stopping it again does nothing.
func (p *proc) stop() {
	select {
	case <-p.exited:
		return // its pid may be another's by now
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM) // it may exit meanwhile
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// bindFailed reports whether the process's log says that a port it was to
// listen on was taken.
func (p *proc) bindFailed() bool {
	out, _ := os.ReadFile(p.log)
	return bytes.Contains(out, []byte("address already in use"))
}

// tail returns the last lines of the process's log, named.
func (p *proc) tail() string {
	out, err := os.ReadFile(p.log)
	if err != nil {
		return fmt.Sprintf("%s: %v", p.name, err)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	lines = lines[max(0, len(lines)-30):]
	return fmt.Sprintf("--- %s (last %d lines of %s)\n%s", p.name, len(lines), p.log, strings.Join(lines, "\n"))
}

// waitReady polls url (the API server's /readyz) until it answers 200 ok,
// failing when one of procs exits first or readyTimeout passes.
func waitReady(client *http.Client, url, token string, procs ...*proc) error {
	return poll(100*time.Millisecond, procs, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
		}
		return nil
	})
}

// waitListening waits until something accepts connections on addr (the
// process p binds it), failing when p exits first or readyTimeout passes.
func waitListening(addr string, p *proc) error {
	var d net.Dialer
	return poll(50*time.Millisecond, []*proc{p}, func(ctx context.Context) error {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return conn.Close()
	})
}

// poll calls try every interval until it returns nil, and fails, with
// try's last error, when one of procs exits first or readyTimeout passes.
func poll(interval time.Duration, procs []*proc, try func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	died := make(chan string, len(procs))
	for _, p := range procs {
		go func() {
			select {
			case <-p.exited:
				died <- p.name
			case <-ctx.Done():
			}
		}()
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		last := try(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-tick.C:
		case name := <-died:
			return fmt.Errorf("%s exited (last try: %w)", name, last)
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v (last try: %w)", readyTimeout, last)
		}
	}
}

// writeServingCert writes a self-signed ECDSA certificate for 127.0.0.1,
// which is also its own CA, to certFile and its key to keyFile, and
// returns the certificate's PEM.
func writeServingCert(certFile, keyFile string) ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "kubetest"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		return nil, err
	}
	return certPEM, writeKey(keyFile, key)
}

// writeECKey writes a new ECDSA P-256 key to path: the API server signs
// service-account tokens with it.
func writeECKey(path string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	return writeKey(path, key)
}

// writeKey writes key to path as an "EC PRIVATE KEY" PEM block.
func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("key: %w", err)
	}
	return nil
}
