package bus_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
)

func publishProbe(t *testing.T, pub *bus.Publisher, p int, container string) {
	t.Helper()
	if err := pub.Publish(context.Background(), bus.For("n").ProbeResults(p), bus.KindProbeResult, "",
		&bus.ProbeResult{PodUID: "u", Container: container, Probe: bus.ProbeLiveness, Result: bus.ProbeFailure}); err != nil {
		t.Fatal(err)
	}
}

// TestFollowStartsAfterAndKeepsNothingOnTheServer: a follower hands on the
// messages after its start sequence, in order, and no others; it leaves no
// durable consumer behind; it is caught up once it handled the last one.
func TestFollowStartsAfterAndKeepsNothingOnTheServer(t *testing.T) {
	ctx := t.Context()
	js, pub := nodeN(t, "worker-1")
	stream := bus.StreamName("n", bus.StreamProbes)
	for range 3 {
		publishProbe(t, pub, 0, "c")
	}
	publishProbe(t, pub, 1, "other partition")
	var got collected
	f, err := bus.Follow(ctx, js, bus.FollowOptions{Stream: stream, Name: "follow-after", Filters: []string{bus.For("n").ProbeResults(0)}, After: 1}, got.handler)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	waitLen(t, &got, 2)
	publishProbe(t, pub, 0, "c")
	waitLen(t, &got, 3)
	testenv.EventuallyTrue(t, 10*time.Second, "caught up", func() bool { return f.CaughtUp(ctx) })
	got.mu.Lock()
	seqs := append([]uint64(nil), got.seqs...)
	got.mu.Unlock()
	// the source's second, third and fifth messages (the fourth went to
	// partition 1).
	if len(seqs) != 3 || seqs[1]-seqs[0] != 1 || seqs[2]-seqs[0] != 3 {
		t.Fatalf("handled envelope seqs %v, want the source's 2nd, 3rd and 5th", seqs)
	}
	if f.Handled() != 5 {
		t.Errorf("Handled() = %d, want stream sequence 5", f.Handled())
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	for name := range s.ListConsumers(ctx).Info() {
		if name.Config.Durable != "" || name.Config.AckPolicy != jetstream.AckNonePolicy || !name.Config.MemoryStorage {
			t.Errorf("a follower left consumer %s: durable %q, ack policy %v, memory %v", name.Name, name.Config.Durable, name.Config.AckPolicy, name.Config.MemoryStorage)
		}
	}
}

// TestFollowSince: a follower given a time starts at the first message
// the server stored at or after it.
func TestFollowSince(t *testing.T) {
	ctx := t.Context()
	js, pub := nodeN(t, "worker-1")
	stream := bus.StreamName("n", bus.StreamProbes)
	publishProbe(t, pub, 0, "before")
	// the server is in this process: one clock. Publish waits for the
	// server's acknowledgement, so the first message was stored before
	// since and the second after.
	since := time.Now()
	publishProbe(t, pub, 0, "after")
	var got collected
	f, err := bus.Follow(ctx, js, bus.FollowOptions{Stream: stream, Name: "follow-since", Since: since}, got.handler)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	waitLen(t, &got, 1)
	testenv.EventuallyTrue(t, 10*time.Second, "caught up", func() bool { return f.CaughtUp(ctx) })
	if f.Handled() != 2 {
		t.Errorf("Handled() = %d, want stream sequence 2 (the message stored after since)", f.Handled())
	}
	got.mu.Lock()
	defer got.mu.Unlock()
	if len(got.seqs) != 1 {
		t.Errorf("handled %d messages, want the one stored after since", len(got.seqs))
	}
}

// TestFollowRetriesAFailedMessageInOrder: a handler error has the same
// message handed on again, before any later one; a panicking handler is
// given a message at most MaxPanicDeliveries times, then the message is
// skipped and the next handled.
func TestFollowRetriesAFailedMessageInOrder(t *testing.T) {
	ctx := t.Context()
	js, pub := nodeN(t, "worker-1")
	const name = "follow-retries"
	m := newTestMetrics(t)
	var mu sync.Mutex
	var order []string
	failures, panics := 0, 0
	f, err := bus.Follow(ctx, js, bus.FollowOptions{Stream: bus.StreamName("n", bus.StreamProbes), Name: name, RetryDelay: 20 * time.Millisecond, Metrics: m},
		func(_ context.Context, _ string, e *bus.Envelope) error {
			r, err := bus.DecodeProbeResult(e)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			switch r.Container {
			case "flaky":
				if failures < 2 {
					failures++
					return context.DeadlineExceeded
				}
			case "poison":
				panics++
				var m map[string]int
				m["boom"]++ // a nil map write: a real runtime panic
			}
			order = append(order, r.Container)
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	publishProbe(t, pub, 0, "flaky")
	publishProbe(t, pub, 0, "after flaky")
	publishProbe(t, pub, 0, "poison")
	publishProbe(t, pub, 0, "after poison")
	testenv.EventuallyTrue(t, 10*time.Second, "every message handled or skipped", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == 3
	})
	mu.Lock()
	defer mu.Unlock()
	if order[0] != "flaky" || order[1] != "after flaky" || order[2] != "after poison" {
		t.Errorf("handled %v, want the flaky message first and the poisoned one skipped", order)
	}
	if failures != 2 || panics != bus.MaxPanicDeliveries {
		t.Errorf("the flaky message failed %d times (want 2), the poisoned one panicked %d times (want %d)", failures, panics, bus.MaxPanicDeliveries)
	}
	if got := testutil.ToFloat64(m.HandlerPanics.WithLabelValues(name)); got != bus.MaxPanicDeliveries {
		t.Errorf("panics counted: %v, want %d", got, bus.MaxPanicDeliveries)
	}
}

// TestFollowSurvivesItsConsumerDeleted: a follower whose consumer vanished
// from the server (a NATS server restarted without it) goes on from the
// last message it handed on, missing nothing and repeating nothing.
func TestFollowSurvivesItsConsumerDeleted(t *testing.T) {
	ctx := t.Context()
	f, pub, s, got := followingOne(t, "follow-reset")
	deleted := 0
	for name := range s.ListConsumers(ctx).Info() {
		if err := s.DeleteConsumer(ctx, name.Name); err != nil {
			t.Fatal(err)
		}
		deleted++
	}
	if deleted != 1 {
		t.Fatalf("deleted %d consumers, want the follower's one", deleted)
	}
	twoMoreInOrder(t, pub, got, 10*time.Second)
	testenv.EventuallyTrue(t, 10*time.Second, "caught up", func() bool { return f.CaughtUp(ctx) })
}

// followingOne starts a follower of the probe results that has handled
// one message; it returns the stream's handle too.
func followingOne(t *testing.T, name string) (*bus.Follower, *bus.Publisher, jetstream.Stream, *collected) {
	t.Helper()
	js, pub := nodeN(t, "worker-1")
	stream := bus.StreamName("n", bus.StreamProbes)
	got := &collected{}
	f, err := bus.Follow(t.Context(), js, bus.FollowOptions{Stream: stream, Name: name}, got.handler)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	publishProbe(t, pub, 0, "c")
	waitLen(t, got, 1)
	s, err := js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	return f, pub, s, got
}

// twoMoreInOrder publishes two more messages and waits for the follower
// to hand on both after the first: three consecutive ones, no other.
func twoMoreInOrder(t *testing.T, pub *bus.Publisher, got *collected, timeout time.Duration) {
	t.Helper()
	publishProbe(t, pub, 0, "c")
	publishProbe(t, pub, 0, "c")
	testenv.Eventually(t, timeout, "the two messages after the first", func() (bool, string) {
		n := got.len()
		return n >= 3, fmt.Sprintf("%d messages", n)
	})
	got.mu.Lock()
	defer got.mu.Unlock()
	if s := got.seqs; len(s) != 3 || s[1]-s[0] != 1 || s[2]-s[0] != 2 {
		t.Fatalf("handled envelope seqs %v, want three consecutive ones", s)
	}
}

// TestFollowMovesOnFromAConsumerNameItCannotUse: a follower whose repair
// cannot create its consumer under the next name (in a cluster: a name
// assigned to a server that died) goes on under another one, missing
// nothing and repeating nothing.
func TestFollowMovesOnFromAConsumerNameItCannotUse(t *testing.T) {
	ctx := t.Context()
	_, pub, s, got := followingOne(t, "follow-blocked")
	var first string
	for c := range s.ListConsumers(ctx).Info() {
		first = c.Name
	}
	prefix, ok := strings.CutSuffix(first, "_1")
	if !ok {
		t.Fatalf("the follower's consumer is %q, want a first ordered consumer (…_1)", first)
	}
	// the next name holds a consumer the repair cannot turn into its own:
	// acknowledgements and a deliver policy may not change on an update.
	if _, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{Name: prefix + "_2", AckPolicy: jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverLastPolicy, InactiveThreshold: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteConsumer(ctx, first); err != nil {
		t.Fatal(err)
	}
	twoMoreInOrder(t, pub, got, 60*time.Second)
}

// TestFollowersSurviveTheirServerKilled: on a three-server cluster, the
// server a client's followers were reached through is killed outright. The
// client reconnects at once, before the others notice the loss, and its
// followers' repairs may place their new consumers on the dead server.
// Every follower still hands on what is published afterwards.
func TestFollowersSurviveTheirServerKilled(t *testing.T) {
	c := testenv.NATSProcessClusterForTest(t, 3)
	ctx := t.Context()
	var nc *nats.Conn
	testenv.EventuallyNoError(t, 30*time.Second, "a client connected to the cluster", func() (err error) {
		nc, err = nats.Connect(strings.Join(c.URLs, ","), nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
		return err
	})
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// until every server has joined JetStream's meta group, a placement
	// may find a peer missing.
	testenv.EventuallyNoError(t, 60*time.Second, "the streams at three replicas", func() error {
		return bus.EnsureStreamsReplicas(ctx, js, "n", 3)
	})
	pub := bus.NewPublisher(nc, js, "n", "worker-1")
	const followers = 16 // a consumer each, so some land on any one server
	got := make([]collected, followers)
	for p := range followers {
		f, err := bus.Follow(ctx, js, bus.FollowOptions{Stream: bus.StreamName("n", bus.StreamProbes), Name: fmt.Sprintf("killed-p%d", p),
			Filters: []string{bus.For("n").ProbeResults(p)}}, got[p].handler)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.Stop)
		publishProbe(t, pub, p, "before")
	}
	waitEach := func(what string, n int, timeout time.Duration) {
		testenv.Eventually(t, timeout, what, func() (bool, string) {
			var behind []int
			for p := range got {
				if got[p].len() < n {
					behind = append(behind, p)
				}
			}
			return len(behind) == 0, fmt.Sprintf("followers %v behind", behind)
		})
	}
	waitEach("each follower's first message", 1, 20*time.Second)

	victim := slices.Index(c.URLs, nc.ConnectedUrl())
	if victim < 0 {
		t.Fatalf("connected to %s, none of %v", nc.ConnectedUrl(), c.URLs)
	}
	c.Kill(victim)
	t.Logf("killed server %d, the client's", victim+1)
	for p := range followers {
		// a publish may meet a stream's leader election.
		testenv.EventuallyNoError(t, 60*time.Second, "a publish after the loss", func() error {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			return pub.Publish(pctx, bus.For("n").ProbeResults(p), bus.KindProbeResult, "",
				&bus.ProbeResult{PodUID: "u", Container: "after", Probe: bus.ProbeLiveness, Result: bus.ProbeFailure})
		})
	}
	// (a publish retried after a lost acknowledgement may be stored twice:
	// only what arrives is checked here, not how often.)
	waitEach("each follower's message published after the loss", 2, 2*time.Minute)
}
