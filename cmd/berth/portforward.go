package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/berth-dev/berth"
)

// portForwardUsage is berth port-forward's help text before its flags.
const portForwardUsage = `[--rank N] ID LOCAL:REMOTE | PORT

Listens on 127.0.0.1:LOCAL and carries each connection, through the
server, to port REMOTE on the worker of running job ID (127.0.0.1 there):
a notebook, a debug server, a dashboard the job serves. PORT alone is the
same port on both sides. It runs until Ctrl-C or until the job ends.
--rank picks the member of a gang. Allowed to whoever may cancel the job.`

func runPortForward(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("port-forward", portForwardUsage)
	cf := m.addClientFlags(fs, false)
	rank := fs.Int("rank", 0, "the member of a gang whose worker to connect to, from 0")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	if len(pos) != 2 {
		return berth.Invalidf("args", "give a job id and LOCAL:REMOTE (or PORT), got %d argument(s)", len(pos))
	}
	if *rank < 0 {
		return berth.Invalidf("--rank", "must be 0 or more, not %d", *rank)
	}
	id := pos[0]
	local, remote, err := parsePorts(pos[1])
	if err != nil {
		return err
	}
	c := m.client(cf)
	if err := c.CheckPortForward(ctx, id, *rank, remote); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(local)))
	if err != nil {
		return fmt.Errorf("listen on port %d: %w", local, err)
	}
	fmt.Fprintf(m.Stdout, "Forwarding from %s to port %d of job %s\n", ln.Addr(), remote, id)

	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ended := make(chan error, 1)
	go func() { // the job's end, Ctrl-C or a failed wait ends the forwarding
		_, err := c.Wait(ctx, []string{id}, false, 0)
		if err == nil {
			fmt.Fprintf(m.Stderr, "berth: job %s has ended; port-forward stops\n", id)
		}
		ended <- err
		_ = ln.Close()
	}()
	var conns sync.WaitGroup
	var acceptErr error
	for {
		conn, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				acceptErr = fmt.Errorf("accept: %w", err)
			}
			break
		}
		conns.Add(1)
		go func() {
			defer conns.Done()
			if err := c.PortForward(ctx, id, *rank, remote, conn); err != nil && ctx.Err() == nil {
				fmt.Fprintf(m.Stderr, "berth: connection from %s: %s\n", conn.RemoteAddr(), errorLine(err))
			}
		}()
	}
	_ = ln.Close()
	cancel()
	conns.Wait()
	waitErr := <-ended
	switch {
	case parent.Err() != nil:
		return parent.Err() // Ctrl-C
	case acceptErr != nil:
		return acceptErr
	case errors.Is(waitErr, context.Canceled):
		return nil
	}
	return waitErr // nil: the job ended
}

// parsePorts parses LOCAL:REMOTE, or PORT for both, each a port number
// from 1 to 65535.
func parsePorts(arg string) (local, remote int, err error) {
	l, r, pair := strings.Cut(arg, ":")
	if !pair {
		r = l
	}
	port := func(s, side string) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 65535 {
			return 0, berth.Invalidf("LOCAL:REMOTE", "%q: %s must be a port number from 1 to 65535, not %q", arg, side, s)
		}
		return n, nil
	}
	if local, err = port(l, "LOCAL"); err != nil {
		return 0, 0, err
	}
	if remote, err = port(r, "REMOTE"); err != nil {
		return 0, 0, err
	}
	return local, remote, nil
}
