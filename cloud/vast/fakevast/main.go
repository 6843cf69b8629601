// Command fakevast serves a fake Vast.ai API (package vasttest) on a
// loopback address, for demos and end-to-end tests:
//
//	go run ./cloud/vast/fakevast --listen 127.0.0.1:PORT [--machines N] [--fault MACHINE=KIND]... [--stage D] [--key KEY] [--vllm PATH]
//
// Machines are 1001, 1002, … offered at rising prices; KIND is one of
// ssh-key, cdi, no-libcuda, stall, vanish, refused, oom. --vllm installs
// an executable (a build of agent/testdata/fakevllm) as vllm on every
// machine, for a pool of bare vLLM nodes. Point a pool at
// http://127.0.0.1:PORT/api/v0 (--vast-url) with the key it prints.
//
// Its running instances are real machines (vasttest.SSHHost): a real
// OpenSSH sshd on a loopback port holding the account's keys, a fake
// nvidia-smi and libcuda, the onstart run as a real process, all under
// --dir (a temporary directory by default, removed at exit). With
// --no-hosts it serves the API and the lifecycle only (SSH port 0).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/berth-dev/berth/cloud/vast/vasttest"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "fakevast:", err)
		os.Exit(2)
	}
}

// faults is the repeated --fault MACHINE=KIND flag.
type faults map[int64]vasttest.Fault

func (f faults) String() string { return fmt.Sprint(map[int64]vasttest.Fault(f)) }

// Set reads MACHINE=KIND.
func (f faults) Set(s string) error {
	m, kind, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("%q is not MACHINE=KIND", s)
	}
	id, err := strconv.ParseInt(m, 10, 64)
	if err != nil {
		return fmt.Errorf("%q: MACHINE %q is not a machine id", s, m)
	}
	k, err := vasttest.ParseFault(kind)
	if err != nil {
		return fmt.Errorf("%q: %w", s, err)
	}
	f[id] = k
	return nil
}

// config is what the flags say.
type config struct {
	listen  string
	dir     string // "": a temporary directory
	noHosts bool
	vllm    string // "": no vllm on the machines
	opts    vasttest.Options
}

// options reads the flags; a bad one is an error naming it.
func options(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("fakevast", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.listen, "listen", "", "address to serve on, host:port on loopback (required)")
	fs.IntVar(&c.opts.Machines, "machines", vasttest.DefaultMachines, "how many machines offer (1001, 1002, …)")
	fs.StringVar(&c.opts.GPUName, "gpu", vasttest.DefaultGPUName, "the machines' GPU model")
	fs.StringVar(&c.opts.APIKey, "key", vasttest.DefaultAPIKey, "the API key accepted")
	fs.DurationVar(&c.opts.Stage, "stage", time.Second, "how long each boot stage lasts (provisioning, created, loading)")
	fs.StringVar(&c.dir, "dir", "", "where the instances' machines live (default: a temporary directory, removed at exit)")
	fs.BoolVar(&c.noHosts, "no-hosts", false, "serve the API only: running instances have no sshd (SSH port 0)")
	f := faults{}
	fs.Var(f, "fault", "MACHINE=KIND: a machine's fault (repeatable); KIND one of ssh-key, cdi, no-libcuda, stall, vanish, refused, oom")
	fs.StringVar(&c.vllm, "vllm", "", "an executable to install as vllm on every machine (a build of agent/testdata/fakevllm)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case c.listen == "":
		return nil, errors.New("--listen is required (e.g. --listen 127.0.0.1:8765)")
	case c.opts.Machines < 1:
		return nil, fmt.Errorf("--machines: %d is not a positive count", c.opts.Machines)
	case c.opts.Stage < 0:
		return nil, fmt.Errorf("--stage: %v is negative", c.opts.Stage)
	case c.opts.APIKey == "":
		return nil, errors.New("--key: must not be empty")
	case c.noHosts && c.dir != "":
		return nil, errors.New("--dir: there are no machines with --no-hosts")
	case c.noHosts && c.vllm != "":
		return nil, errors.New("--vllm: there are no machines with --no-hosts")
	}
	if c.vllm != "" {
		abs, err := filepath.Abs(c.vllm)
		if err != nil {
			return nil, fmt.Errorf("--vllm: %w", err)
		}
		if fi, err := os.Stat(abs); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("--vllm: %s is not an executable file", c.vllm)
		}
		c.vllm = abs
	}
	if _, _, err := net.SplitHostPort(c.listen); err != nil {
		return nil, fmt.Errorf("--listen: %w", err)
	}
	for m := range f {
		if m < vasttest.FirstMachine || m >= vasttest.FirstMachine+int64(c.opts.Machines) {
			return nil, fmt.Errorf("--fault: machine %d is not one of %d…%d", m, vasttest.FirstMachine, vasttest.FirstMachine+c.opts.Machines-1)
		}
	}
	c.opts.Faults = f
	return c, nil
}

// gpus is what the machines' nvidia-smi says for the fake's GPU model.
func gpus(model string) vasttest.HostGPUs {
	g := vasttest.DefaultGPUs
	g.Name = "NVIDIA " + model
	if strings.HasPrefix(model, "RTX") || strings.HasPrefix(model, "GTX") {
		g.Name = "NVIDIA GeForce " + model
	}
	return g
}

func run(args []string, stderr io.Writer) error {
	c, err := options(args, stderr)
	if err != nil {
		return err
	}
	if !c.noHosts {
		if _, err := os.Stat(vasttest.SSHD); err != nil {
			return fmt.Errorf("real machines need OpenSSH's sshd (install openssh-server), or pass --no-hosts: %w", err)
		}
		if c.dir == "" {
			if c.dir, err = os.MkdirTemp("", "fakevast-"); err != nil {
				return err
			}
			defer os.RemoveAll(c.dir)
		}
		opts := []vasttest.SSHHostOption{vasttest.WithGPUs(func(int64) vasttest.HostGPUs { return gpus(c.opts.GPUName) })}
		if c.vllm != "" {
			opts = append(opts, vasttest.WithCommand("vllm", c.vllm))
		}
		host, err := vasttest.NewSSHHost(c.dir, opts...)
		if err != nil {
			return fmt.Errorf("--dir: %w", err)
		}
		defer host.Close()
		c.opts.Host = host
	}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	srv := vasttest.New(c.opts)
	defer srv.Close()
	machines := "machines in " + c.dir
	if c.noHosts {
		machines = "no machines behind the instances"
	}
	fmt.Fprintf(stderr, "fakevast: serving %d offers at http://%s%s (key %s; %s)\n", c.opts.Machines, ln.Addr(), vasttest.BasePath, c.opts.APIKey, machines)
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	select {
	case err := <-done:
		return err
	case <-sig:
		return hs.Close()
	}
}
