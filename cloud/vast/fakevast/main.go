// Command fakevast serves a fake Vast.ai API (package vasttest) on a
// loopback address, for demos and end-to-end tests:
//
//	go run ./cloud/vast/fakevast --listen 127.0.0.1:PORT [--machines N] [--fault MACHINE=KIND]... [--stage D] [--key KEY]
//
// Machines are 1001, 1002, … offered at rising prices; KIND is one of
// ssh-key, cdi, no-libcuda, stall, vanish, refused. Point a pool at
// http://127.0.0.1:PORT/api/v0 (--vast-url) with the key it prints.
// Its instances have no machines behind them (SSH port 0): the API and
// its lifecycle only.
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

// options reads the flags; a bad one is an error naming it.
func options(args []string, stderr io.Writer) (listen string, opts vasttest.Options, err error) {
	fs := flag.NewFlagSet("fakevast", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&listen, "listen", "", "address to serve on, host:port on loopback (required)")
	fs.IntVar(&opts.Machines, "machines", vasttest.DefaultMachines, "how many machines offer (1001, 1002, …)")
	fs.StringVar(&opts.GPUName, "gpu", vasttest.DefaultGPUName, "the machines' GPU model")
	fs.StringVar(&opts.APIKey, "key", vasttest.DefaultAPIKey, "the API key accepted")
	fs.DurationVar(&opts.Stage, "stage", time.Second, "how long each boot stage lasts (provisioning, created, loading)")
	f := faults{}
	fs.Var(f, "fault", "MACHINE=KIND: a machine's fault (repeatable); KIND one of ssh-key, cdi, no-libcuda, stall, vanish, refused")
	if err := fs.Parse(args); err != nil {
		return "", opts, err
	}
	switch {
	case fs.NArg() > 0:
		return "", opts, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case listen == "":
		return "", opts, errors.New("--listen is required (e.g. --listen 127.0.0.1:8765)")
	case opts.Machines < 1:
		return "", opts, fmt.Errorf("--machines: %d is not a positive count", opts.Machines)
	case opts.Stage < 0:
		return "", opts, fmt.Errorf("--stage: %v is negative", opts.Stage)
	case opts.APIKey == "":
		return "", opts, errors.New("--key: must not be empty")
	}
	if _, _, err := net.SplitHostPort(listen); err != nil {
		return "", opts, fmt.Errorf("--listen: %w", err)
	}
	for m := range f {
		if m < vasttest.FirstMachine || m >= vasttest.FirstMachine+int64(opts.Machines) {
			return "", opts, fmt.Errorf("--fault: machine %d is not one of %d…%d", m, vasttest.FirstMachine, vasttest.FirstMachine+opts.Machines-1)
		}
	}
	opts.Faults = f
	return listen, opts, nil
}

func run(args []string, stderr io.Writer) error {
	listen, opts, err := options(args, stderr)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	srv := vasttest.New(opts)
	defer srv.Close()
	fmt.Fprintf(stderr, "fakevast: serving %d machines at http://%s%s (key %s)\n", opts.Machines, ln.Addr(), vasttest.BasePath, opts.APIKey)
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
