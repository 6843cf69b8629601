package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berth-dev/berth/store"
)

// leaderLock is the key of the session advisory lock the leader holds
// ("bertlead" in ASCII).
const leaderLock = 0x626572746C656164

// Leadership timing: how often a standby tries for the lock, how often the
// leader confirms its connection, and how long a confirmation may take
// before leadership counts as lost (the lease).
const (
	campaignEvery = 250 * time.Millisecond
	confirmEvery  = time.Second
	leaderLease   = 5 * time.Second
)

var _ store.Leadership = (*Store)(nil)

// Lead implements store.Leadership with a session advisory lock on a
// connection of its own: PostgreSQL releases it the moment the leader's
// process dies or its connection drops, and a standby polling for it
// takes over. The leader confirms its connection every second; if a
// confirmation fails or takes longer than the lease, lost is closed and
// the connection dropped, releasing the lock.
func (s *Store) Lead(ctx context.Context, self string) (<-chan struct{}, error) {
	conn, err := s.campaign(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, `INSERT INTO leader (id, url, since) VALUES (1, $1, $2)
		ON CONFLICT (id) DO UPDATE SET url = excluded.url, since = excluded.since`, self, time.Now().UnixNano()); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("lead: record leader: %w", err)
	}
	lost := make(chan struct{})
	s.watchers.Go(func() {
		defer close(lost)
		defer conn.Close(context.Background())
		t := time.NewTicker(confirmEvery)
		defer t.Stop()
		for {
			select {
			case <-s.stop.Done():
				return
			case <-t.C:
			}
			cctx, cancel := context.WithTimeout(s.stop, leaderLease)
			err := conn.Ping(cctx)
			cancel()
			if err != nil {
				return
			}
		}
	})
	return lost, nil
}

// campaign connects and waits until it holds the leadership lock.
func (s *Store) campaign(ctx context.Context) (*pgx.Conn, error) {
	for {
		conn, err := s.dial(ctx)
		if err == nil {
			for {
				var held bool
				if err = conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(leaderLock)).Scan(&held); err != nil {
					break
				}
				if held {
					return conn, nil
				}
				if err = sleep(ctx, campaignEvery); err != nil {
					break
				}
			}
			conn.Close(context.Background())
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err := sleep(ctx, campaignEvery); err != nil {
			return nil, err
		}
	}
}

// dial opens a connection of its own, with keepalives.
func (s *Store) dial(ctx context.Context) (*pgx.Conn, error) {
	config := s.config.Copy()
	config.DialFunc = keepAliveDialer.DialContext
	return pgx.ConnectConfig(ctx, config)
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// Leader implements store.Leadership: the URL the leader recorded, if the
// leadership lock is held now.
func (s *Store) Leader(ctx context.Context) (string, error) {
	var url string
	var held bool
	err := s.pool.QueryRow(ctx, `SELECT l.url, EXISTS (SELECT 1 FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND ((classid::bigint << 32) | objid::bigint) = $1
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))
		FROM leader l WHERE l.id = 1`, int64(leaderLock)).Scan(&url, &held)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !held) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read leader: %w", err)
	}
	return url, nil
}
