package poll

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	calls := 0
	if err := Until(t.Context(), time.Minute, time.Millisecond, "third call", func() (bool, string, error) {
		calls++
		return calls == 3, "", nil
	}); err != nil || calls != 3 {
		t.Errorf("done on the third call: err %v after %d calls", err, calls)
	}
	dead := errors.New("agent exited")
	if err := Until(t.Context(), time.Minute, time.Millisecond, "x", func() (bool, string, error) { return false, "", dead }); !errors.Is(err, dead) {
		t.Errorf("check's error: got %v", err)
	}
	err := Until(t.Context(), 20*time.Millisecond, time.Millisecond, "pods Ready", func() (bool, string, error) { return false, "2 of 3", nil })
	if err == nil || !strings.Contains(err.Error(), "pods Ready: not within 20ms (2 of 3)") {
		t.Errorf("timeout: got %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := Until(ctx, time.Minute, time.Millisecond, "x", func() (bool, string, error) { return false, "", nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("ended context: got %v", err)
	}
}
