package periodic

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestRun: nothing runs before the first period, then f runs on each,
// and Run returns once the context ends.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	var calls atomic.Int32
	done := make(chan struct{})
	start := time.Now()
	var first time.Duration
	go func() {
		defer close(done)
		Run(ctx, 20*time.Millisecond, func(context.Context) {
			if calls.Add(1) == 1 {
				first = time.Since(start)
			}
		})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for calls.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls within 10s: want 3", calls.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if first < 20*time.Millisecond {
		t.Errorf("first call after %v: want one period (20ms) at least", first)
	}
}
