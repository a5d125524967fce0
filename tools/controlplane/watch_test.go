package main

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
)

// watchRunning returns the exit error once what it watches stops, and nil,
// saying it stops, once its context ends.
func TestWatchRunning(t *testing.T) {
	exited := errors.New("exited")
	var checks atomic.Int32
	running := func() bool { return checks.Add(1) < 2 } // down at the second check
	var out strings.Builder
	if err := watchRunning(t.Context(), &out, running, "stopping", exited); !errors.Is(err, exited) {
		t.Errorf("a stopped process: %v, want %v", err, exited)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := watchRunning(ctx, &out, func() bool { return true }, "stopping", exited); err != nil {
		t.Errorf("ctx ended: %v, want nil", err)
	}
	if out.String() != "stopping\n" {
		t.Errorf("printed %q, want the stopping line once", out.String())
	}
}
