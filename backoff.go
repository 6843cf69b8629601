package berth

import "time"

// DoublingDelay is the wait after failure n (1, 2, …) before the next try:
// 1 s, doubling, at most limit. Service restarts and webhook deliveries
// back off this way.
func DoublingDelay(n int, limit time.Duration) time.Duration {
	if n > 30 {
		return limit // past any limit worth setting, and before the shift overflows
	}
	return min(time.Second<<max(n-1, 0), limit)
}
