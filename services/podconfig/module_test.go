package podconfig_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/splitlet/splitlet/libs/app"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/services/podconfig"
)

// TestServiceRunsAlone: the fx module starts with an embedded NATS against
// a real API server, reports ready once the API source synced, and stops
// cleanly; a bad key value stops it at once with exit code 2.
func TestServiceRunsAlone(t *testing.T) {
	var stderr bytes.Buffer
	if code := app.Run(context.Background(), "podconfig", []string{"--podconfig.notification-mode=bogus"}, &stderr, podconfig.Service()); code == 0 {
		t.Fatalf("a bad notification mode was accepted: %s", stderr.String())
	}

	cp := testenv.ControlPlaneForTest(t)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	stderr.Reset()
	go func() {
		done <- app.Run(ctx, "podconfig", []string{"--kubeconfig=" + cp.Kubeconfig, "--node-name=module-node",
			"--data-dir=" + t.TempDir(), "--http-addr=" + addr, "--log-level=warn",
			"--podconfig.static-pod-path=" + t.TempDir(), "--podconfig.snapshot-period=1s"}, &stderr, podconfig.Service())
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
			cancel()
			t.Fatalf("not ready in 30 s (last error %v)", err)
		}
		select {
		case code := <-done:
			t.Fatalf("exited early with %d", code)
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit code %d", code)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("did not stop in 15 s")
	}
}
