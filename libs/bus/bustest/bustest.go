// Package bustest runs a nats-server in a test with a node's bus
// identities (docs/bus.md, Identities and permissions): every stage's nkey
// with its permissions and the admin's, the node's streams made by the
// admin, and the permission violations the server logs recorded, so that a
// test can run a stage under its identity and check it stays within it.
package bustest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/splitlet/splitlet/libs/bus"
)

// Server is a nats-server on 127.0.0.1 with a node's bus identities.
type Server struct {
	// URL is the client URL.
	URL        string
	Server     *server.Server
	Violations *Violations
	dir        string
}

// Start starts the server for node, makes the node's streams with the
// admin identity and stops the server when t ends.
func Start(t testing.TB, node string) *Server {
	t.Helper()
	dir := t.TempDir()
	s := &Server{dir: dir, Violations: &Violations{}}
	auth, err := bus.WriteIdentities(node, s.Seed)
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "nats.conf")
	text := fmt.Sprintf("listen: 127.0.0.1:-1\njetstream { store_dir: %q }\n%s", filepath.Join(dir, "js"), auth)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("nats-server configuration with the bus identities: %v", err)
	}
	opts.NoSigs = true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.SetLoggerV2(s.Violations, false, false, false)
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		t.Fatal("nats-server with the bus identities not ready in 10s")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	s.Server, s.URL = ns, ns.ClientURL()
	nc := s.Connect(t, bus.AdminIdentity)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.EnsureStreams(ctx, js, node); err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureShadowStream(ctx, js, node, 0); err != nil {
		t.Fatal(err)
	}
	return s
}

// Seed is the path of the identity's nkey seed (admin or a stage).
func (s *Server) Seed(id string) string { return filepath.Join(s.dir, "ids", id+".nk") }

// Options are the client options of the identity: its nkey and, for a
// stage, its own inboxes (bus.InboxPrefix).
func (s *Server) Options(t testing.TB, id string) []nats.Option {
	t.Helper()
	opt, err := nats.NkeyOptionFromSeed(s.Seed(id))
	if err != nil {
		t.Fatal(err)
	}
	opts := []nats.Option{opt}
	if id != bus.AdminIdentity {
		opts = append(opts, nats.CustomInboxPrefix(bus.InboxPrefix(id)))
	}
	return opts
}

// Connect connects as the identity, closed when t ends.
func (s *Server) Connect(t testing.TB, id string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.URL, append(s.Options(t, id), opts...)...)
	if err != nil {
		t.Fatalf("connect as %s: %v", id, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Violations collects the permission violations a nats-server logs (its
// logger: Server.SetLoggerV2).
type Violations struct {
	mu    sync.Mutex
	lines []string
}

func (v *Violations) add(format string, a ...any) {
	line := fmt.Sprintf(format, a...)
	if strings.Contains(line, "Violation") {
		v.mu.Lock()
		v.lines = append(v.lines, line)
		v.mu.Unlock()
	}
}

// Noticef implements server.Logger.
func (v *Violations) Noticef(f string, a ...any) { v.add(f, a...) }

// Warnf implements server.Logger.
func (v *Violations) Warnf(f string, a ...any) { v.add(f, a...) }

// Fatalf implements server.Logger.
func (v *Violations) Fatalf(f string, a ...any) { v.add(f, a...) }

// Errorf implements server.Logger.
func (v *Violations) Errorf(f string, a ...any) { v.add(f, a...) }

// Debugf implements server.Logger.
func (v *Violations) Debugf(string, ...any) {}

// Tracef implements server.Logger.
func (v *Violations) Tracef(string, ...any) {}

// All returns the violations logged so far.
func (v *Violations) All() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.lines...)
}
