package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth/client"
	"github.com/berth-dev/berth/wire"
)

// openStream dials stream m on server, the server of the session that
// asked for it, and serves it (supervision.stream) until it ends. runCtx
// outlives the session: a stream is the attempt's, not the session's.
func (s *session) openStream(runCtx context.Context, server string, m *wire.StreamOpen) {
	c, _, _, err := s.dial(runCtx, server, wire.StreamPath(m.ID))
	if err != nil {
		s.log.Warn("open a stream the server asked for", "stream", m.Kind, "attempt", m.AttemptID, "err", err)
		return
	}
	c.SetReadLimit(2 * wire.MaxStreamMessage)
	s.work.stream(runCtx, m, c)
}

// stream implements supervision: it serves stream m on c until the client
// or the attempt ends, and closes c.
func (s *supervisor) stream(ctx context.Context, m *wire.StreamOpen, c *websocket.Conn) {
	defer c.CloseNow()
	at := s.get(m.AttemptID)
	if at == nil || at.proc == nil || hasEnded(at.proc) {
		streamFailed(ctx, c, fmt.Sprintf("attempt %s is not running on %s", m.AttemptID, s.cfg.Host))
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-at.proc.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	switch m.Kind {
	case wire.StreamExec:
		if at.spec == nil {
			streamFailed(ctx, c, fmt.Sprintf("attempt %s was started by an earlier agent on %s, which alone knew its environment", m.AttemptID, s.cfg.Host))
			return
		}
		runExec(ctx, at.spec, m.Command, c)
	case wire.StreamPort:
		tcp, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(m.Port)))
		if err != nil {
			streamFailed(ctx, c, fmt.Sprintf("port %d on %s: %v", m.Port, s.cfg.Host, err))
			return
		}
		if err := client.JoinStream(ctx, c, tcp, wire.StreamStdout, wire.StreamStdin); err != nil && ctx.Err() == nil {
			s.log.Debug("port-forward stream ended", "attempt", m.AttemptID, "port", m.Port, "err", err)
		}
	default:
		streamFailed(ctx, c, fmt.Sprintf("this agent cannot open a %q stream", m.Kind))
	}
}

// streamFailed tells the client why the stream does nothing, and closes it.
func streamFailed(ctx context.Context, c *websocket.Conn, why string) {
	if c.Write(ctx, websocket.MessageBinary, append([]byte{wire.StreamError}, why...)) == nil {
		_ = c.Close(websocket.StatusNormalClosure, "")
	}
}

// StartExec starts argv as an exec into the attempt spec describes: with
// the environment and in the working directory its command has, as its
// account and in its cgroup (its Sandbox), in a process group of its own
// (killed if the agent dies, and with the attempt), with stdin, stdout
// and stderr the given files. A bare command name is looked up as for the
// attempt's command. Every process an exec starts goes through here.
func StartExec(spec *Spec, argv []string, stdin, stdout, stderr *os.File) (*exec.Cmd, error) {
	cmd, err := command(Spec{Command: argv, Env: spec.Env})
	if err != nil {
		return nil, err
	}
	cmd.Dir = spec.Workdir
	if cmd.Dir == "" {
		cmd.Dir = spec.Dir
	}
	cmd.Env = environ(*spec)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := spec.Sandbox.Start(cmd); err != nil { // as the attempt's account, in its cgroup
		return nil, err
	}
	return cmd, nil
}

// runExec runs argv (StartExec) with its stdin, stdout and stderr joined
// to the stream c, then sends its exit code (a shell's 127 or 126, with
// the reason on stderr, when it cannot start) and closes c. When its
// leader exits, the rest of its process group is killed, as an attempt's
// is; when the stream or ctx ends first (the client went away, the
// attempt ended), the whole group is. It returns once every goroutine it
// started has.
func runExec(ctx context.Context, spec *Spec, argv []string, c *websocket.Conn) {
	code, input, err := execStreams(ctx, spec, argv, c)
	defer input.Wait()
	defer c.CloseNow()
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		msg := "berth exec: " + err.Error() + "\n"
		_ = c.Write(ctx, websocket.MessageBinary, append([]byte{wire.StreamStderr}, msg...))
	}
	if c.Write(ctx, websocket.MessageBinary, append([]byte{wire.StreamExit}, strconv.Itoa(code)...)) == nil {
		_ = c.Close(websocket.StatusNormalClosure, "")
	}
}

// execStreams is runExec up to the exit code: it returns the command's,
// or, with the error that kept it from starting, the shell's code for it,
// and the goroutine that reads the client's messages, which ends with the
// stream.
func execStreams(ctx context.Context, spec *Spec, argv []string, c *websocket.Conn) (code int, input *sync.WaitGroup, err error) {
	input = &sync.WaitGroup{}
	var pipes [3][2]*os.File // stdin, stdout, stderr: read end, write end
	defer func() {
		for _, p := range pipes {
			for _, f := range p {
				if f != nil {
					_ = f.Close()
				}
			}
		}
	}()
	for i := range pipes {
		r, w, err := os.Pipe()
		if err != nil {
			return exitNotExecutable, input, fmt.Errorf("pipe: %w", err)
		}
		pipes[i] = [2]*os.File{r, w}
	}
	cmd, err := StartExec(spec, argv, pipes[0][0], pipes[1][1], pipes[2][1])
	if err != nil {
		return *execFailureCode(err), input, err
	}
	// The child has its ends; closing ours lets the readers see its end.
	for _, f := range []**os.File{&pipes[0][0], &pipes[1][1], &pipes[2][1]} {
		_ = (*f).Close()
		*f = nil
	}
	stdin := pipes[0][1]
	pgid := cmd.Process.Pid
	var mu sync.Mutex
	ended := false // the leader was reaped and its group killed
	kill := func() {
		mu.Lock()
		defer mu.Unlock()
		if !ended {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}
	input.Add(1)
	go func() { // the client's messages: stdin until the stream ends
		defer input.Done()
		defer kill()
		for {
			_, data, err := c.Read(ctx)
			if err != nil {
				return
			}
			switch {
			case len(data) == 0 || data[0] != wire.StreamStdin || stdin == nil:
			case len(data) == 1:
				_ = stdin.Close()
				stdin = nil
			default:
				if _, err := stdin.Write(data[1:]); err != nil {
					_ = stdin.Close()
					stdin = nil
				}
			}
		}
	}()
	var out sync.WaitGroup
	for _, p := range []struct {
		f  *os.File
		ch byte
	}{{pipes[1][0], wire.StreamStdout}, {pipes[2][0], wire.StreamStderr}} {
		out.Add(1)
		go func() {
			defer out.Done()
			_ = client.SendStream(ctx, c, p.f, p.ch)
		}()
	}
	err = cmd.Wait()
	kill() // its group ends with it; the pipes then end
	mu.Lock()
	ended = true
	mu.Unlock()
	out.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, input, nil
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return ee.ExitCode(), input, nil
	case errors.As(err, &ee):
		ws := ee.Sys().(syscall.WaitStatus)
		return 128 + int(ws.Signal()), input, nil
	}
	return exitNotExecutable, input, err
}
