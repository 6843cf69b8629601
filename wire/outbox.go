package wire

import (
	"context"
	"errors"
	"sync"
)

// MaxFrameBytes is the size past which an Outbox starts a new frame. One
// message larger than this still goes out whole, alone in its frame.
const MaxFrameBytes = 1 << 20

// Outbox queues messages from any goroutine and writes them in order from
// one goroutine (Run), as many as are waiting per frame. Batching cuts the
// frames, syscalls and wake-ups per message when a session is busy, and
// costs nothing when it is idle (a lone message goes out at once).
type Outbox struct {
	limit int

	mu    sync.Mutex
	queue []outgoing
	wake  chan struct{} // a message was queued
	room  chan struct{} // closed and replaced when Run takes the queue
	done  chan struct{} // closed when Run has returned
}

// ErrOutboxClosed is Send's error once Run has returned: the session the
// outbox served is over.
var ErrOutboxClosed = errors.New("wire: outbox closed")

type outgoing struct {
	typ     string
	payload any
	last    bool
}

// NewOutbox returns an outbox. With limit > 0, Send waits while that many
// messages are queued (backpressure for senders that can wait); 0 never
// waits.
func NewOutbox(limit int) *Outbox {
	return &Outbox{limit: limit, wake: make(chan struct{}, 1), room: make(chan struct{}), done: make(chan struct{})}
}

// Send queues one message. It returns ctx's error if it had to wait for
// room and ctx ended first, and ErrOutboxClosed once Run has returned; the
// message is then not queued.
func (o *Outbox) Send(ctx context.Context, typ string, payload any) error {
	return o.enqueue(ctx, outgoing{typ: typ, payload: payload})
}

// SendLast queues one message after which Run writes nothing more and
// returns nil: a session that must tell its peer why before closing.
func (o *Outbox) SendLast(typ string, payload any) {
	_ = o.enqueue(context.Background(), outgoing{typ: typ, payload: payload, last: true})
}

func (o *Outbox) enqueue(ctx context.Context, m outgoing) error {
	o.mu.Lock()
	for o.limit > 0 && len(o.queue) >= o.limit && !m.last {
		room := o.room
		o.mu.Unlock()
		select {
		case <-room:
		case <-o.done:
			return ErrOutboxClosed
		case <-ctx.Done():
			return ctx.Err()
		}
		o.mu.Lock()
	}
	select {
	case <-o.done:
		o.mu.Unlock()
		return ErrOutboxClosed
	default:
	}
	o.queue = append(o.queue, m)
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
	return nil
}

// Run writes queued messages until ctx ends (returning its error), a write
// or an encoding fails (returning that error), or the message of SendLast
// is written (returning nil).
func (o *Outbox) Run(ctx context.Context, write func(context.Context, []byte) error) error {
	defer func() {
		o.mu.Lock()
		close(o.done)
		o.queue = nil
		o.mu.Unlock()
	}()
	var batch []outgoing
	var frame []byte
	for {
		select {
		case <-o.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
		o.mu.Lock()
		batch, o.queue = o.queue, batch[:0]
		close(o.room)
		o.room = make(chan struct{})
		o.mu.Unlock()
		frame = frame[:0]
		for i, m := range batch {
			var err error
			if frame, err = AppendFrame(frame, m.typ, m.payload); err != nil {
				return err
			}
			batch[i] = outgoing{}
			if !m.last && len(frame) < MaxFrameBytes && i < len(batch)-1 {
				continue
			}
			if err := write(ctx, frame); err != nil {
				return err
			}
			frame = frame[:0]
			if m.last {
				return nil
			}
		}
	}
}
