package periodic_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitlet/splitlet/libs/periodic"
	"github.com/splitlet/splitlet/libs/testenv"
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
		periodic.Run(ctx, 20*time.Millisecond, func(context.Context) {
			if calls.Add(1) == 1 {
				first = time.Since(start)
			}
		})
	}()
	testenv.EventuallyTrue(t, 10*time.Second, "three calls", func() bool { return calls.Load() >= 3 })
	cancel()
	<-done
	if first < 20*time.Millisecond {
		t.Errorf("first call after %v: want one period (20ms) at least", first)
	}
}
