// Package apptest runs services in the test's own process, as their binary
// would (app.Run with the common flags), for module and conformance tests.
package apptest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splitlet/splitlet/libs/app"
)

// Stage is a running app.Run.
type Stage struct {
	// Addr is the health address (/readyz, /metrics).
	Addr   string
	binary string
	cancel context.CancelFunc
	done   chan int
	out    *Buffer
	once   sync.Once
}

// Start runs the services with app.Run and args (plus --http-addr,
// --data-dir and --log-level=warn, which args may override), waits until
// /readyz answers 200, and stops them when t ends. The run must stop with
// exit code 0, or t fails.
func Start(t testing.TB, binary string, args []string, services ...app.Service) *Stage {
	t.Helper()
	s := &Stage{binary: binary, done: make(chan int, 1), out: &Buffer{}}
	// Port 0: the stage binds a free port and writes it to
	// <data-dir>/<binary>.http-addr, so no other test can take it first.
	dataDir := t.TempDir()
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--data-dir="); ok {
			dataDir = v
		}
	}
	addrFile := filepath.Join(dataDir, binary+".http-addr")
	args = append([]string{"--http-addr=127.0.0.1:0", "--data-dir=" + dataDir, "--log-level=warn"}, args...)
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() { s.done <- app.Run(ctx, binary, args, s.out, services...) }()
	t.Cleanup(func() { s.Stop(t) })
	deadline := time.Now().Add(30 * time.Second)
	client := &http.Client{Timeout: 5 * time.Second}
	for {
		var err error
		if data, rerr := os.ReadFile(addrFile); rerr != nil {
			err = rerr
		} else {
			addr := strings.TrimSpace(string(data))
			var resp *http.Response
			if resp, err = client.Get("http://" + addr + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					s.Addr = addr
					return s
				}
				err = fmt.Errorf("/readyz: %s", resp.Status)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready within 30 s (last error %v): %s", binary, err, s.out.String())
		}
		select {
		case code := <-s.done:
			s.done <- code
			t.Fatalf("%s exited early with %d: %s", binary, code, s.out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop stops the services (once) and fails t unless they exit 0 within 30 s.
func (s *Stage) Stop(t testing.TB) {
	t.Helper()
	s.once.Do(func() {
		s.cancel()
		select {
		case code := <-s.done:
			if code != 0 {
				t.Errorf("%s exited with %d: %s", s.binary, code, s.out.String())
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not stop within 30 s", s.binary)
		}
	})
}

// RunBad runs the services with args that must be refused, and returns the
// exit code and what was printed.
func RunBad(binary string, args []string, services ...app.Service) (int, string) {
	var out bytes.Buffer
	code := app.Run(context.Background(), binary, args, &out, services...)
	return code, out.String()
}

// Buffer is a writer safe to read while a process or services write it;
// also a zap sink (Sync does nothing).
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// Sync implements zapcore.WriteSyncer.
func (b *Buffer) Sync() error { return nil }

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
