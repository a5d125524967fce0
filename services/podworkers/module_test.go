package podworkers_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/splitlet/splitlet/libs/app"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/services/podworkers"
)

// TestServiceRunsAlone: the fx module starts with an embedded NATS against a
// real API server, reports ready, and stops cleanly; a bad key value stops
// it at once.
func TestServiceRunsAlone(t *testing.T) {
	var stderr bytes.Buffer
	if code := app.Run(context.Background(), "podworkers", []string{"--podworkers.lease-ttl=1s"}, &stderr, podworkers.Service()); code == 0 {
		t.Fatalf("a lease TTL shorter than two refreshes was accepted: %s", stderr.String())
	}
	cp := testenv.ControlPlaneForTest(t)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	stderr.Reset()
	go func() {
		done <- app.Run(ctx, "podworkers", []string{"--kubeconfig=" + cp.Kubeconfig, "--node-name=module-node",
			"--data-dir=" + t.TempDir(), "--http-addr=" + addr, "--log-level=warn", "--runtime=process"}, &stderr, podworkers.Service())
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready in 30 s (last error %v): %s", err, stderr.String())
		}
		select {
		case code := <-done:
			t.Fatalf("exited early with %d: %s", code, stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit code %d: %s", code, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("did not stop in 20 s")
	}
}
