package app

import (
	"bytes"
	"context"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/splitlet/splitlet/libs/testenv"
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
	t.Cleanup(cancel)
	testenv.Eventually(t, 30*time.Second, "healthcheck passed", func() (bool, string) {
		var out bytes.Buffer
		code := Run(t.Context(), "hc", append(args, "--healthcheck"), &out, svc)
		return code == 0, out.String()
	})
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
