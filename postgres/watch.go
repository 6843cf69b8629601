package postgres

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/jackc/pgx/v5"
)

// Backoff between attempts to listen again after the connection broke.
const (
	minRelisten = 100 * time.Millisecond
	maxRelisten = 5 * time.Second
)

// WatchControls implements store.ControlWatcher. It LISTENs on channel
// worker_control, which the trigger on worker_controls NOTIFYs at each
// commit that writes a row, on a connection of its own. The channel
// delivers once it listens, after each notification and after each
// reconnect; it is closed when ctx ends or the store closes. It returns an
// error if it cannot listen at first; a connection that breaks later is
// re-established with backoff.
func (s *Store) WatchControls(ctx context.Context) (<-chan struct{}, error) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.stop, cancel)
	conn, err := s.listen(ctx)
	if err != nil {
		stop()
		cancel()
		return nil, fmt.Errorf("watch worker controls: %w", err)
	}
	changed := make(chan struct{}, 1)
	changed <- struct{}{}
	s.watchers.Go(func() {
		defer func() {
			close(changed)
			stop()
			cancel()
		}()
		for conn != nil {
			if _, err := conn.WaitForNotification(ctx); err == nil {
				signal(changed)
				continue
			}
			conn.Close(context.Background())
			if conn = s.relisten(ctx); conn != nil {
				signal(changed)
			}
		}
	})
	return changed, nil
}

// keepAliveDialer probes an idle watcher's connection, so that a server
// gone silent is noticed in about half a minute, not TCP's default hours:
// a watcher only reads.
var keepAliveDialer = &net.Dialer{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 10 * time.Second, Interval: 5 * time.Second, Count: 4}}

// listen connects and LISTENs on worker_control.
func (s *Store) listen(ctx context.Context) (*pgx.Conn, error) {
	conn, err := s.dial(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, `LISTEN worker_control`); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// relisten listens again, waiting longer after each failure; it returns
// nil once ctx ends.
func (s *Store) relisten(ctx context.Context) *pgx.Conn {
	for wait := minRelisten; ; wait = min(2*wait, maxRelisten) {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		if conn, err := s.listen(ctx); err == nil {
			return conn
		}
	}
}

// signal delivers on changed unless a delivery is already waiting.
func signal(changed chan<- struct{}) {
	select {
	case changed <- struct{}{}:
	default:
	}
}
