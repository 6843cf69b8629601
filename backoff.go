package berth

import (
	"context"
	"time"
)

// DoublingDelay is the wait after failure n (1, 2, …) before the next try:
// 1 s, doubling, at most limit. Service restarts and webhook deliveries
// back off this way.
func DoublingDelay(n int, limit time.Duration) time.Duration {
	if n > 30 {
		return limit // past any limit worth setting, and before the shift overflows
	}
	return min(time.Second<<max(n-1, 0), limit)
}

// Sleep waits d, or until ctx ends, and then returns ctx's error.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
