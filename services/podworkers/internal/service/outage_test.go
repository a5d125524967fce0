package service

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/services/podworkers/internal/ownership"
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

// On a three-server NATS cluster with the streams and the lease bucket at
// three replicas (nats-replicas=3), losing the server that leads the pod
// status stream restarts no container, the replica keeps its partitions,
// and new pods still start.
func TestNATSClusterServerLostRestartsNoContainer(t *testing.T) {
	cluster := testenv.NATSClusterForTest(t, 3)
	n3 := &testenv.NATS{Server: cluster.Servers[0], URL: cluster.URLs}
	_, js := n3.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// the streams at three replicas from the start, as the stages make
	// them with nats-replicas=3; until every server has joined JetStream's
	// meta group a placement may find a peer offline, so it is retried.
	for err := bus.EnsureStreamsReplicas(ctx, js, "pw-natsloss", 3); err != nil; err = bus.EnsureStreamsReplicas(ctx, js, "pw-natsloss", 3) {
		select {
		case <-ctx.Done():
			t.Fatalf("the streams at three replicas: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	e := newEnvOn(t, "pw-natsloss", n3)
	e.natsReplicas = 3
	a := e.startReplica(t, config.RuntimeSim, func(c *Config) { c.ReplicaID = "c1" })
	eventually(t, 30*time.Second, "the replica owns everything", func() bool { return slices.Equal(a.OwnedPartitions(), []int{0, 1, 2, 3}) })
	for _, what := range []string{bus.StreamPodUpdates, bus.StreamPodStatus, bus.StreamProbes, bus.StreamState} {
		s, err := js.Stream(ctx, bus.StreamName(e.node, what))
		if err != nil {
			t.Fatal(err)
		}
		if r := s.CachedInfo().Config.Replicas; r != 3 {
			t.Fatalf("stream %s has %d replicas, want 3", what, r)
		}
	}
	kv, err := js.KeyValue(ctx, ownership.BucketName(bus.NodeToken(e.node)))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := kv.Status(ctx); err != nil || st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas != 3 {
		t.Fatalf("lease bucket status %v, %v: want 3 replicas", st, err)
	}
	pods := e.runningPods(t, "natsloss", 30)
	before, n := e.snapshot(pods)

	// the set-up above may have used the first context's time: the
	// stream's leader is asked with a context of its own.
	ctx, cancelInfo := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelInfo()
	s, err := js.Stream(ctx, bus.StreamName(e.node, bus.StreamPodStatus))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
		t.Fatalf("pod status stream cluster info %+v, %v", info, err)
	}
	lost := -1
	for i, srv := range cluster.Servers {
		if srv.Name() == info.Cluster.Leader {
			lost = i
		}
	}
	if lost < 0 {
		t.Fatalf("leader %q is none of the servers", info.Cluster.Leader)
	}
	cluster.StopServer(lost)
	t.Logf("stopped %s, the pod status stream's leader", info.Cluster.Leader)

	more := e.runningPods(t, "after-loss", 5)
	if !e.reportedSince(n, more) {
		t.Fatal("pods started after the loss were not reported")
	}
	e.noRestartSince(t, n, before)
	after, _ := e.snapshot(pods)
	for _, p := range pods {
		if fmt.Sprint(after[p.UID]) != fmt.Sprint(before[p.UID]) {
			t.Errorf("pod %s: %v after the loss, %v before", p.Name, after[p.UID], before[p.UID])
		}
	}
	// a take-over that met the leader election gave its partition back; the
	// replica takes it again once the cluster answers.
	eventually(t, 30*time.Second, "the replica owns every partition after the loss", func() bool {
		return slices.Equal(a.OwnedPartitions(), []int{0, 1, 2, 3})
	})
}
