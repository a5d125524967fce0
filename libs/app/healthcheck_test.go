package app

import (
	"bytes"
	"context"
	"testing"
	"time"

	"go.uber.org/fx"
)

// TestHealthcheckFindsRunningProcess: `--healthcheck` with the same keys as a
// running process (port 0) finds its address in the data dir and passes;
// with no process, or once it stopped, it fails.
func TestHealthcheckFindsRunningProcess(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--node-name=hc-node", "--data-dir=" + dir}
	svc := Service{Name: "noop", Module: func() fx.Option { return fx.Options() }}
	var out bytes.Buffer
	if code := Run(context.Background(), "hc", append(args, "--healthcheck"), &out, svc); code != 1 {
		t.Fatalf("healthcheck with nothing running: exit %d, want 1 (%s)", code, out.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var logs bytes.Buffer
	go func() { done <- Run(ctx, "hc", args, &logs, svc) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var out bytes.Buffer
		code := Run(context.Background(), "hc", append(args, "--healthcheck"), &out, svc)
		if code == 0 {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("healthcheck never passed; last: %s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("process exit %d", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("process did not stop")
	}
	out.Reset()
	if code := Run(context.Background(), "hc", append(args, "--healthcheck"), &out, svc); code != 1 {
		t.Fatalf("healthcheck after stop: exit %d, want 1", code)
	}
}
