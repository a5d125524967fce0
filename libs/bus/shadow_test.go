package bus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/bus/bustest"
	"github.com/splitlet/splitlet/libs/testenv"
)

// TestShadowIdentity: on a server with the node's identities, the prober's
// shadow publishes under its shadow prefix (kept in the shadow stream) and
// reads the live inputs through durables of its own; it may not publish a
// live probe result, nor create, read or acknowledge for the live prober's
// durables; and a live stage whose ordered consumers take any name
// (statussync) may not take the shadow's durables.
func TestShadowIdentity(t *testing.T) {
	t.Parallel() // waits out refusals and timeouts: alongside the others
	const node = "shadow-node"
	srv := bustest.Start(t, node)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s := bus.For(node)
	id := bus.ShadowIdentity(bus.StageProber)
	nc := srv.Connect(t, id, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// allowed: its shadow prefix (stored), its own durables.
	pub := bus.NewPublisher(nc, js, node, "shadow-test")
	res := &bus.ProbeResult{PodUID: "u1", Container: "c", Probe: bus.ProbeReadiness, Result: bus.ProbeSuccess}
	if err := pub.Publish(ctx, s.Shadow(bus.StageProber).ProbeResults(1), bus.KindProbeResult, "", res); err != nil {
		t.Fatalf("publish on the shadow prefix: %v", err)
	}
	for _, c := range []struct{ stream, durable string }{
		{bus.StreamPodUpdates, bus.ShadowDurable(bus.DurableProberPodUpdates)},
		{bus.StreamPodStatus, bus.ShadowDurable(bus.DurableProberPodStatus)},
	} {
		if _, err := js.CreateOrUpdateConsumer(ctx, bus.StreamName(node, c.stream), jetstream.ConsumerConfig{Durable: c.durable, AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
			t.Errorf("create its durable %s: %v", c.durable, err)
		}
	}
	if len(srv.Violations.All()) > 0 {
		t.Fatalf("violations by what the shadow may do: %v", srv.Violations.All())
	}
	// refused: live subjects, the live prober's durables.
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 2*time.Second) }
	pctx, pcancel := short()
	if err := pub.Publish(pctx, s.ProbeResults(1), bus.KindProbeResult, "", res); err == nil {
		t.Error("the shadow published a live probe result")
	}
	pcancel()
	for _, d := range []string{bus.DurableProberPodUpdates, bus.DurableStatussyncPodUpdates} {
		cctx, ccancel := short()
		if _, err := js.CreateOrUpdateConsumer(cctx, bus.StreamName(node, bus.StreamPodUpdates), jetstream.ConsumerConfig{Durable: d, AckPolicy: jetstream.AckExplicitPolicy}); err == nil {
			t.Errorf("the shadow made or took the live durable %s", d)
		}
		ccancel()
	}
	if err := nc.Publish("$JS.ACK."+bus.StreamName(node, bus.StreamPodUpdates)+"."+bus.DurableProberPodUpdates+".1.1.1.1.0", nil); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	// a live stage with ordered consumers of any name may not take the
	// shadow's durable.
	ss := srv.Connect(t, bus.StageStatussync, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	sjs, err := jetstream.New(ss)
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := short()
	defer ccancel()
	if _, err := sjs.Consumer(cctx, bus.StreamName(node, bus.StreamPodUpdates), bus.ShadowDurable(bus.DurableProberPodUpdates)); err == nil {
		t.Error("statussync read the shadow's durable")
	}
	// the server saw each refusal.
	// (the server logs violations asynchronously)
	testenv.Eventually(t, 5*time.Second, "a violation for each refused step (publish, two consumers, an ack, statussync's read)", func() (bool, string) {
		v := srv.Violations.All()
		return len(v) >= 5, fmt.Sprintf("%d: %v", len(v), v)
	})
	// its outputs are in the shadow stream, and in no live stream.
	st, err := srv.Connect(t, bus.AdminIdentity).JetStream()
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.StreamInfo(bus.StreamName(node, bus.StreamShadow))
	if err != nil || info.State.Msgs != 1 {
		t.Errorf("shadow stream: %v, %+v; want 1 message", err, info)
	}
	if info, err := st.StreamInfo(bus.StreamName(node, bus.StreamProbes)); err != nil || info.State.Msgs != 0 {
		t.Errorf("live probes stream: %v, %+v; want no message", err, info)
	}
}

// TestShadowStatussyncIdentity: statussync's shadow, whose ordered
// consumers take any name, may make its own durables and not the live
// statussync's (nor the other shadow's), and publishes its StatusPatch
// under its prefix alone.
func TestShadowStatussyncIdentity(t *testing.T) {
	t.Parallel() // waits out refusals and timeouts: alongside the others
	const node = "shadow-ss"
	srv := bustest.Start(t, node)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	nc := srv.Connect(t, bus.ShadowIdentity(bus.StageStatussync), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream := bus.StreamName(node, bus.StreamPodUpdates)
	if _, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: bus.ShadowDurable(bus.DurableStatussyncPodUpdates), AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Errorf("its own durable: %v", err)
	}
	pub := bus.NewPublisher(nc, js, node, "shadow-statussync")
	patch := &bus.StatusPatch{PodUID: "u", Namespace: "d", Name: "p", Patch: []byte(`{"status":{"phase":"Running"}}`)}
	if err := pub.Publish(ctx, bus.For(node).Shadow(bus.StageStatussync).StatusPatches(0), bus.KindStatusPatch, "", patch); err != nil {
		t.Errorf("publish its StatusPatch: %v", err)
	}
	if v := srv.Violations.All(); len(v) > 0 {
		t.Fatalf("violations by what the shadow may do: %v", v)
	}
	for _, d := range []string{bus.DurableStatussyncPodUpdates, bus.ShadowDurable(bus.DurableProberPodUpdates)} {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		if _, err := js.CreateOrUpdateConsumer(cctx, stream, jetstream.ConsumerConfig{Durable: d, AckPolicy: jetstream.AckExplicitPolicy}); err == nil {
			t.Errorf("the statussync shadow made or took the durable %s", d)
		}
		ccancel()
	}
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	defer pcancel()
	if err := pub.Publish(pctx, bus.For(node).Shadow(bus.StageProber).ProbeResults(0), bus.KindProbeResult, "",
		&bus.ProbeResult{PodUID: "u", Container: "c", Probe: bus.ProbeReadiness, Result: bus.ProbeSuccess}); err == nil {
		t.Error("the statussync shadow published under the prober shadow's prefix")
	}
}

// TestShadowPodworkersIdentity: the pod workers' shadow publishes its pod
// statuses under its shadow prefix and follows the probe results; it may
// not publish a live pod status or agent readiness, take a live stage's
// durable on the probes stream, nor write to the partition lease bucket.
func TestShadowPodworkersIdentity(t *testing.T) {
	t.Parallel() // waits out refusals and timeouts: alongside the others
	const node = "shadow-pw"
	srv := bustest.Start(t, node)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	nc := srv.Connect(t, bus.ShadowIdentity(bus.StagePodworkers), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s := bus.For(node)
	probes := bus.StreamName(node, bus.StreamProbes)
	// a follower of the probe results, as bus.Follow makes it.
	if _, err := js.CreateConsumer(ctx, probes, jetstream.ConsumerConfig{Name: bus.OrderedName(bus.ShadowIdentity(bus.StagePodworkers)),
		FilterSubjects: []string{s.ProbeResults(1)}, AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true, InactiveThreshold: time.Minute}); err != nil {
		t.Errorf("its own follower of the probe results: %v", err)
	}
	pub := bus.NewPublisher(nc, js, node, "shadow-podworkers")
	st := &bus.PodRuntimeStatus{UID: "u", Namespace: "d", Name: "p"}
	if err := pub.Publish(ctx, s.Shadow(bus.StagePodworkers).PodStatus(1), bus.KindPodRuntimeStatus, "", st); err != nil {
		t.Errorf("publish its pod status: %v", err)
	}
	if v := srv.Violations.All(); len(v) > 0 {
		t.Fatalf("violations by what the shadow may do: %v", v)
	}
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 2*time.Second) }
	refused := []func(context.Context) error{
		func(c context.Context) error { return pub.Publish(c, s.PodStatus(1), bus.KindPodRuntimeStatus, "", st) },
		func(c context.Context) error {
			return pub.Publish(c, s.AgentReady(), bus.KindAgentReadiness, "", &bus.AgentReadiness{Ready: true, Partitions: 2})
		},
		func(c context.Context) error {
			_, err := js.CreateOrUpdateConsumer(c, probes, jetstream.ConsumerConfig{Durable: bus.DurableStatussyncProbes, AckPolicy: jetstream.AckExplicitPolicy})
			return err
		},
		func(c context.Context) error {
			_, err := js.Publish(c, "$KV."+bus.LeaseBucket(node)+".p0", []byte("shadow"))
			return err
		},
	}
	for i, f := range refused {
		c, cc := short()
		if err := f(c); err == nil {
			t.Errorf("step %d (live status, agent readiness, a live stage's durable, lease write): allowed", i)
		}
		cc()
	}
}
