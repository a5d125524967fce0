package testenv

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATS is an embedded nats-server with JetStream, listening on 127.0.0.1.
type NATS struct {
	Server *server.Server
	URL    string
}

// StartNATS starts a server with its store in storeDir, on a random port.
func StartNATS(storeDir string) (*NATS, error) {
	ns, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      server.RANDOM_PORT,
		JetStream: true,
		StoreDir:  storeDir,
		NoSigs:    true,
		NoLog:     true,
	})
	if err != nil {
		return nil, err
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, errNotReady
	}
	return &NATS{Server: ns, URL: ns.ClientURL()}, nil
}

type notReady struct{}

func (notReady) Error() string { return "testenv: nats-server not ready in 10s" }

var errNotReady = notReady{}

// Stop shuts the server down and waits.
func (n *NATS) Stop() {
	n.Server.Shutdown()
	n.Server.WaitForShutdown()
}

// NATSForTest starts a server for t, stopped when t ends.
func NATSForTest(t testing.TB) *NATS {
	t.Helper()
	n, err := StartNATS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n
}

// Connect returns a client connection and JetStream handle, closed when t ends.
func (n *NATS) Connect(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}
