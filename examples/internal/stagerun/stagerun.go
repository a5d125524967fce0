// Package stagerun runs a stage in the test's process, as its binary would
// (app.Run with the common flags), for the conformance kit to test it.
package stagerun

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/splitlet/splitlet/libs/app"
	"github.com/splitlet/splitlet/libs/testenv"
)

// logBuffer is a writer safe to read while the stage writes it.
type logBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}

// Start runs the services with app.Run and args (plus --http-addr,
// --data-dir and --log-level=warn unless given), waits until /readyz
// answers 200, and stops them when t ends (failing t unless they stop
// cleanly). The stage's log is printed when t fails.
func Start(t *testing.T, binary string, args []string, services ...app.Service) {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	args = append([]string{"--http-addr=" + addr, "--data-dir=" + t.TempDir(), "--log-level=warn"}, args...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	logs := &logBuffer{}
	go func() { done <- app.Run(ctx, binary, args, logs, services...) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("%s exited with %d", binary, code)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not stop within 30 s", binary)
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", binary, logs.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready within 30 s (last error %v)", binary, err)
		}
		select {
		case code := <-done:
			done <- code
			t.Fatalf("%s exited early with %d: %s", binary, code, logs.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
