package agent

import (
	"context"
	"errors"
	"io"
	"os"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// report ships the rest of an ended attempt's output and its last
// progress, then its result.
func (s *supervisor) report(ctx context.Context, at *attempt) {
	at.mu.Lock()
	defer at.mu.Unlock()
	if at.result == nil {
		return
	}
	if err := s.shipLocked(ctx, at); err != nil {
		return
	}
	if err := s.sendProgress(ctx, at); err != nil {
		return
	}
	res := *at.result // a copy: an earlier send of it may still be encoding
	res.LogSize = at.sent
	_ = s.send(ctx, wire.TypeJobResult, &res)
}

// sendProgress sends at's latest progress unless the server has it.
func (s *supervisor) sendProgress(ctx context.Context, at *attempt) error {
	v, ok := at.progress.pending()
	if !ok {
		return nil
	}
	if err := s.send(ctx, wire.TypeProgress, &wire.Progress{AttemptID: at.id, Progress: at.secrets.Redact(v)}); err != nil {
		return err
	}
	at.progress.sent(v)
	return nil
}

const chunkSize = 64 << 10

// shipLocked sends the output from at.sent (counted from at.logStart) to
// the end of the file.
func (s *supervisor) shipLocked(ctx context.Context, at *attempt) error {
	if p, never := at.proc.(*doneProcess); never && !p.output {
		return nil // it ended before it began: no output to look for
	}
	if at.file == nil {
		// Most short jobs print nothing: look before opening.
		if info, err := os.Stat(at.log); err == nil && info.Size()-at.logStart <= at.sent {
			return nil
		}
		f, err := os.Open(at.log)
		if errors.Is(err, os.ErrNotExist) {
			return nil // no output file yet
		}
		if err != nil {
			return err
		}
		at.file = f
	}
	var buf []byte
	for {
		info, err := at.file.Stat()
		if err != nil {
			return err
		}
		if info.Size()-at.logStart <= at.sent {
			return nil
		}
		if buf == nil {
			buf = make([]byte, chunkSize)
		}
		// One chunk holds one stream's output: it ends where the stream
		// changes, or where the streams are told apart up to.
		read, stream, runEnds := buf, "", false
		if at.streams != nil {
			stderr, limit, changes := at.streams.StreamAt(at.logStart + at.sent)
			if stderr {
				stream = berth.StreamStderr
			}
			if left := limit - at.logStart - at.sent; left <= int64(len(read)) {
				if left <= 0 {
					return nil // not told apart yet
				}
				read, runEnds = read[:left], changes
			}
		}
		n, err := at.file.ReadAt(read, at.logStart+at.sent)
		if n > 0 {
			at.scan(buf[:n])
			// The whole output, or this run of one stream, is read.
			whole := errors.Is(err, io.EOF) || at.logStart+at.sent+int64(n) >= info.Size()
			final := (at.result != nil && whole) || (runEnds && n == len(read))
			if n = at.secrets.Mask(buf[:n], final); n == 0 {
				return nil // what is there may be the start of a secret: wait for more
			}
			chunk := append([]byte(nil), buf[:n]...)
			if err := s.send(ctx, wire.TypeLog, &wire.Log{AttemptID: at.id, Offset: at.sent, Data: chunk, Stream: stream}); err != nil {
				return err
			}
			at.sent += int64(n)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
	}
}

// scan looks for progress lines in output read at at.sent, past what was
// scanned before (output is shipped again after a reconnect).
func (at *attempt) scan(output []byte) {
	end := at.sent + int64(len(output))
	if end <= at.scanned {
		return
	}
	if v, ok := at.lines.scan(output[max(0, at.scanned-at.sent):]); ok {
		at.progress.set(v)
	}
	at.scanned = end
}

// ackLog implements supervision: the server has the attempt's output up
// to m.Offset, or, when it asks for a resend, from there on only.
func (s *supervisor) ackLog(m *wire.Ack) {
	at := s.get(m.AttemptID)
	if at == nil {
		return
	}
	at.mu.Lock()
	at.acked = max(at.acked, m.Offset)
	if m.Resend {
		at.acked, at.sent = m.Offset, m.Offset
	}
	if at.streams != nil {
		at.streams.forget(at.logStart + at.acked)
	}
	at.mu.Unlock()
}

// shipLoop ships the output and the latest progress, when it changed, of
// running attempts every ShipEvery.
func (s *supervisor) shipLoop(ctx context.Context) {
	every(ctx, s.cfg.ShipEvery, func() bool {
		s.mu.Lock()
		live := make([]*attempt, 0, len(s.attempts))
		for _, at := range s.attempts {
			live = append(live, at)
		}
		s.mu.Unlock()
		for _, at := range live {
			at.mu.Lock()
			if at.result == nil && s.shipLocked(ctx, at) == nil {
				_ = s.sendProgress(ctx, at)
			}
			at.mu.Unlock()
		}
		return true
	})
}

// every calls fn every interval until ctx ends or fn returns false.
func every(ctx context.Context, interval time.Duration, fn func() bool) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !fn() {
			return
		}
	}
}
