package discovery_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/discovery"
	"github.com/splitlet/splitlet/libs/testenv"
)

// TestServeReportsLagAndPartitions runs a stage's consumer and another
// stage's on a real nats-server, holds their handlers so that messages pile
// up, and reads the stage's status from its status subject and from
// $SRV.STATS: the lag is what its own consumer has not acknowledged, and
// goes to 0 once released.
func TestServeReportsLagAndPartitions(t *testing.T) {
	const node, stage, n = "disc-node", "statussync", 5
	srv := testenv.NATSForTest(t)
	nc, plain := srv.Connect(t)
	consumers := bus.NewConsumers()
	js := bus.WithConsumers(plain, consumers)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := bus.EnsureStreams(ctx, js, node); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	held := func(ctx context.Context, _ string, _ *bus.Envelope) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	stop, err := bus.Consume(ctx, js, bus.ConsumerOptions{Stream: bus.StreamName(node, bus.StreamProbes), Durable: stage + "-test"}, held)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// another stage of the process, its durable named alike, lists its
	// consumer on its own list: this stage does not report it.
	stopOther, err := bus.Consume(ctx, bus.WithConsumers(plain, bus.NewConsumers()),
		bus.ConsumerOptions{Stream: bus.StreamName(node, bus.StreamProbes), Durable: stage + "-other"}, held)
	if err != nil {
		t.Fatal(err)
	}
	defer stopOther()
	pub := bus.NewPublisher(nc, js, node, "prober-test")
	for i := range n {
		if err := pub.Publish(ctx, bus.For(node).ProbeResults(0), bus.KindProbeResult, "", &bus.ProbeResult{
			PodUID: "uid", Namespace: "default", Name: "p", Container: fmt.Sprint("c", i),
			Probe: bus.ProbeReadiness, Result: bus.ProbeSuccess,
		}); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := discovery.Serve(nc, discovery.Options{Node: node, Version: "v0.1.0-dev", Stage: discovery.Stage{
		Name: stage, Instance: "i-1", Partitions: func() []int { return []int{3, 1} }, Consumers: consumers,
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()

	status := func() discovery.StageStatus {
		t.Helper()
		m, err := nc.Request(bus.For(node).Status(stage), nil, 5*time.Second)
		if err != nil {
			t.Fatalf("status request: %v", err)
		}
		var st discovery.StageStatus
		if err := json.Unmarshal(m.Data, &st); err != nil {
			t.Fatalf("%v: %s", err, m.Data)
		}
		return st
	}
	waitLag := func(want uint64) discovery.StageStatus {
		t.Helper()
		var st discovery.StageStatus
		testenv.Eventually(t, 20*time.Second, fmt.Sprintf("lag %d", want), func() (bool, string) {
			st = status()
			return st.Lag == want, fmt.Sprintf("%+v", st)
		})
		return st
	}
	st := waitLag(n)
	if st.Node != node || st.Stage != stage || st.Instance != "i-1" || !st.Ready || len(st.Partitions) != 2 ||
		len(st.Consumers) != 1 || st.Consumers[0].Durable != stage+"-test" {
		t.Errorf("status %+v", st)
	}

	// $SRV.STATS of the service carries the same in its endpoint data.
	m, err := nc.Request(fmt.Sprintf("%s.%s.%s", micro.APIPrefix, micro.StatsVerb, discovery.ServiceName(stage)), nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var stats micro.Stats
	if err := json.Unmarshal(m.Data, &stats); err != nil {
		t.Fatal(err)
	}
	if stats.Version != "0.1.0-dev" || stats.Metadata["node"] != node || len(stats.Endpoints) != 1 {
		t.Fatalf("stats %+v", stats)
	}
	var inStats discovery.StageStatus
	if err := json.Unmarshal(stats.Endpoints[0].Data, &inStats); err != nil || inStats.Lag != n {
		t.Errorf("stats endpoint data %s (%v): want lag %d", stats.Endpoints[0].Data, err, n)
	}

	close(release)
	waitLag(0)
}
