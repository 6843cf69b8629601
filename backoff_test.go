package berth

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDoublingDelay(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		n     int
		limit time.Duration
		want  time.Duration
	}{
		{-3, time.Minute, time.Second},
		{0, time.Minute, time.Second},
		{1, time.Minute, time.Second},
		{2, time.Minute, 2 * time.Second},
		{6, time.Minute, 32 * time.Second},
		{7, time.Minute, time.Minute},
		{30, 1000 * time.Hour, 1000 * time.Hour},
		{31, 1000 * time.Hour, 1000 * time.Hour},
		{1 << 40, time.Minute, time.Minute},
	} {
		if got := DoublingDelay(tt.n, tt.limit); got != tt.want {
			t.Errorf("DoublingDelay(%d, %v) = %v, want %v", tt.n, tt.limit, got, tt.want)
		}
	}
}

// TestSleep checks that Sleep returns nil once its wait is over, and the
// context's error at once when the context has ended, however long the
// wait asked for.
func TestSleep(t *testing.T) {
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("Sleep(1ms) = %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep(1h) on an ended context = %v, want context.Canceled", err)
	}
}
