package service

import (
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/testenv"
)

// natsAt starts a nats-server on a fixed port and store, as a restart of
// the node's NATS would come back.
func natsAt(t *testing.T, dir string, port int) *testenv.NATS {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		t.Fatal("nats-server not ready in 10s")
	}
	return &testenv.NATS{Server: ns, URL: ns.ClientURL()}
}

// The NATS server goes away for longer than the lease TTL and comes back
// with its store: the replica fences its partitions, takes them back (its
// leases still name it) and adopts its pods: no container restarts.
func TestNATSOutageRestartsNoContainer(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	first := natsAt(t, dir, port)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			first.Stop()
		}
	})
	e := newEnvOn(t, "pw-outage", first)
	a := e.startReplica(t, config.RuntimeSim, tuned("o1"))
	eventually(t, 30*time.Second, "the replica owns everything", func() bool { return slices.Equal(a.OwnedPartitions(), []int{0, 1, 2, 3}) })
	pods := e.runningPods(t, "outage", 40)
	before, n := e.snapshot(pods)

	first.Stop()
	stopped = true
	// down until the replica has fenced every lease (its renewals fail
	// for longer than the TTL allows)
	eventually(t, 15*time.Second, "every lease fenced while NATS is down", func() bool { return len(a.OwnedPartitions()) == 0 })
	second := natsAt(t, dir, port)
	t.Cleanup(second.Stop) // runs before the replica's own clean-up: stop it first
	defer stopReplica(t, a)
	if second.URL != first.URL {
		t.Fatalf("NATS came back at %s, not %s", second.URL, first.URL)
	}
	eventually(t, 60*time.Second, "every pod reported again after the outage", func() bool { return e.reportedSince(n, pods) })
	eventually(t, 30*time.Second, "the replica owns everything again", func() bool { return slices.Equal(a.OwnedPartitions(), []int{0, 1, 2, 3}) })
	e.noRestartSince(t, n, before)
	after, _ := e.snapshot(pods)
	for _, p := range pods {
		if fmt.Sprint(after[p.UID]) != fmt.Sprint(before[p.UID]) {
			t.Errorf("pod %s: %v after the outage, %v before", p.Name, after[p.UID], before[p.UID])
		}
	}
}
