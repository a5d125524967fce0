package bus_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
)

type collected struct {
	mu   sync.Mutex
	seqs []uint64
	ops  []bus.Op
}

func (c *collected) handler(_ context.Context, _ string, e *bus.Envelope) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seqs = append(c.seqs, e.Seq)
	c.ops = append(c.ops, e.Op)
	return nil
}

func (c *collected) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seqs)
}

func waitLen(t *testing.T, c *collected, n int) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("%d messages", n), func() (bool, string) {
		got := c.len()
		return got >= n, fmt.Sprintf("%d messages", got)
	})
}

// nodeN gives a test NATS server with the streams of node "n" and a
// publisher of the given source on it.
func nodeN(t *testing.T, source string) (jetstream.JetStream, *bus.Publisher) {
	t.Helper()
	nc, js := testenv.NATSForTest(t).Connect(t)
	if err := bus.EnsureStreams(context.Background(), js, "n"); err != nil {
		t.Fatal(err)
	}
	return js, bus.NewPublisher(nc, js, "n", source)
}

// waitDrained waits until the durable consumer has nothing pending and
// nothing waiting for an acknowledgement (a message still being retried
// stays there).
func waitDrained(t *testing.T, js jetstream.JetStream, stream, durable string) {
	t.Helper()
	ctx := context.Background()
	cons, err := js.Consumer(ctx, stream, durable)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "consumer "+durable+" drained", func() (bool, string) {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.NumPending == 0 && info.NumAckPending == 0, fmt.Sprintf("pending=%d ackPending=%d", info.NumPending, info.NumAckPending)
	})
}

// TestDurableDeliveryAndDedup: messages published while a consumer is away
// reach it when it comes back under the same durable name; a message sent
// twice (same seq, as after a lost ack) is handled once; a malformed message
// is dropped, not redelivered, and does not block the ones after it.
func TestDurableDeliveryAndDedup(t *testing.T) {
	ctx := t.Context()
	n := testenv.NATSForTest(t)
	nc, js := n.Connect(t)
	const node = "node-a"
	if err := bus.EnsureStreams(ctx, js, node); err != nil {
		t.Fatal(err)
	}
	if err := bus.EnsureStreams(ctx, js, node); err != nil {
		t.Fatalf("EnsureStreams is not idempotent: %v", err)
	}
	subj := bus.For(node)
	pub := bus.NewPublisher(nc, js, node, "api")
	update := func(op bus.Op, uid string) {
		t.Helper()
		p := pod("p-"+uid, uid)
		if err := pub.Publish(ctx, subj.PodUpdates(bus.Partition(string(p.UID), 16)), bus.KindPodUpdate, op, &bus.PodUpdate{Pods: []corev1.Pod{p}}); err != nil {
			t.Fatal(err)
		}
	}
	var got collected
	opts := bus.ConsumerOptions{Stream: bus.StreamName(node, bus.StreamPodUpdates), Durable: "test-consumer"}
	stop, err := bus.Consume(ctx, js, opts, got.handler)
	if err != nil {
		t.Fatal(err)
	}
	update(bus.OpAdd, "1")
	update(bus.OpUpdate, "1")
	waitLen(t, &got, 2)
	stop()

	// Away: these wait in the stream. One is a duplicate of the other with
	// the same sequence number, sent as plain stream messages without
	// message IDs so that only the receiver's dedup can drop it.
	update(bus.OpDelete, "1")
	data, _, err := pub.Seal(bus.KindPodUpdate, bus.OpRemove, &bus.PodUpdate{Pods: []corev1.Pod{pod("p-1", "1")}})
	if err != nil {
		t.Fatal(err)
	}
	target := subj.PodUpdates(bus.Partition("uid-1", 16))
	for range 2 {
		if _, err := js.Publish(ctx, target, data); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.Publish(ctx, target, []byte(`{"schemaVersion":1,"kind":"PodUpdate"}`)); err != nil {
		t.Fatal(err)
	}
	update(bus.OpAdd, "2")

	stop, err = bus.Consume(ctx, js, opts, got.handler)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	waitLen(t, &got, 5)
	got.mu.Lock()
	ops := append([]bus.Op(nil), got.ops...)
	got.mu.Unlock()
	want := []bus.Op{bus.OpAdd, bus.OpUpdate, bus.OpDelete, bus.OpRemove, bus.OpAdd}
	for i := range want {
		if ops[i] != want[i] {
			t.Fatalf("ops %v, want %v", ops, want)
		}
	}
	// Nothing more arrives: the duplicate was dropped, the malformed one
	// terminated. The consumer has acknowledged everything.
	waitDrained(t, js, opts.Stream, opts.Durable)
	if n := got.len(); n != 5 {
		t.Fatalf("handled %d messages, want 5 (duplicate not dropped?)", n)
	}
}

// TestReconcilesOnTheirOwnSubject: a RECONCILE on its
// partition's reconcile subject is kept in the pod-updates stream, but a
// consumer of PodUpdatesAll (the prober's, statussync's) is never sent it,
// while a consumer of the partition's two subjects (its owner's, the pod
// workers') gets the partition's updates and reconciles in publish order.
// The publisher's seq runs across both subjects: the receiver's per-subject
// dedup drops none of them as already seen.
func TestReconcilesOnTheirOwnSubject(t *testing.T) {
	ctx := t.Context()
	js, pub := nodeN(t, "api")
	s := bus.For("n")
	const part = 3
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "default", UID: "uid-r"}}
	send := func(part int, op bus.Op) {
		t.Helper()
		subject := s.PodUpdates(part)
		if op == bus.OpReconcile {
			subject = s.PodReconciles(part)
		}
		if err := pub.Publish(ctx, subject, bus.KindPodUpdate, op, &bus.PodUpdate{Pods: []corev1.Pod{p}}); err != nil {
			t.Fatal(err)
		}
	}
	sent := []bus.Op{bus.OpAdd, bus.OpReconcile, bus.OpUpdate, bus.OpReconcile, bus.OpReconcile, bus.OpDelete, bus.OpReconcile}
	for _, op := range sent {
		send(part, op)
	}
	// another partition's: for neither consumer of partition 3 (the first
	// takes only its ADD).
	send(part+1, bus.OpAdd)
	send(part+1, bus.OpReconcile)

	stream := bus.StreamName("n", bus.StreamPodUpdates)
	var all, owner collected
	for _, c := range []struct {
		durable string
		filters []string
		into    *collected
	}{
		{"every-partition", []string{s.PodUpdatesAll()}, &all},
		{"owner-p3", s.PartitionPodUpdates(part), &owner},
	} {
		stop, err := bus.Consume(ctx, js, bus.ConsumerOptions{Stream: stream, Durable: c.durable, Filters: c.filters}, c.into.handler)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
	}
	waitLen(t, &owner, len(sent))
	waitDrained(t, js, stream, "owner-p3")
	waitDrained(t, js, stream, "every-partition")
	all.mu.Lock()
	defer all.mu.Unlock()
	owner.mu.Lock()
	defer owner.mu.Unlock()
	if want := []bus.Op{bus.OpAdd, bus.OpUpdate, bus.OpDelete, bus.OpAdd}; !slices.Equal(all.ops, want) {
		t.Errorf("a consumer of %s got %v, want %v (no reconcile)", s.PodUpdatesAll(), all.ops, want)
	}
	if !slices.Equal(owner.ops, sent) {
		t.Errorf("the owner of partition %d got %v, want %v in publish order", part, owner.ops, sent)
	}
	for i := 1; i < len(owner.seqs); i++ {
		if owner.seqs[i] <= owner.seqs[i-1] {
			t.Errorf("the owner got seq %d after %d", owner.seqs[i], owner.seqs[i-1])
		}
	}
}

// TestHandlerErrorRedelivers: a failing handler gets the message again.
func TestHandlerErrorRedelivers(t *testing.T) {
	ctx := t.Context()
	js, pub := nodeN(t, "worker-1")
	var mu sync.Mutex
	calls := 0
	done := make(chan struct{})
	stop, err := bus.Consume(ctx, js, bus.ConsumerOptions{
		Stream: bus.StreamName("n", bus.StreamProbes), Durable: "retry", RetryDelay: 50 * time.Millisecond,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}, func(context.Context, string, *bus.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			return context.DeadlineExceeded
		}
		close(done)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := pub.Publish(ctx, bus.For("n").ProbeResults(0), bus.KindProbeResult, "", &bus.ProbeResult{PodUID: "u", Container: "c", Probe: bus.ProbeLiveness, Result: bus.ProbeFailure}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("message not redelivered after a handler error")
	}
}

// TestConcurrentPublishKeepsSequenceOrder: goroutines sharing one publisher
// on one subject lose nothing to the receivers' stale-message rule, because
// messages leave in sequence order.
func TestConcurrentPublishKeepsSequenceOrder(t *testing.T) {
	ctx := t.Context()
	js, pub := nodeN(t, "prober-1")
	var got collected
	stop, err := bus.Consume(ctx, js, bus.ConsumerOptions{Stream: bus.StreamName("n", bus.StreamProbes), Durable: "order"}, got.handler)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	const goroutines, each = 8, 200
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				r := &bus.ProbeResult{PodUID: "u", Container: "c", Probe: bus.ProbeReadiness, Result: bus.ProbeSuccess, Message: string(rune('a'+g)) + string(rune('0'+i%10))}
				if _, err := pub.PublishAsync(t.Context(), bus.For("n").ProbeResults(1), bus.KindProbeResult, "", r); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	waitLen(t, &got, goroutines*each)
	got.mu.Lock()
	defer got.mu.Unlock()
	for i := 1; i < len(got.seqs); i++ {
		if got.seqs[i] <= got.seqs[i-1] {
			t.Fatalf("message %d has seq %d after %d", i, got.seqs[i], got.seqs[i-1])
		}
	}
}

// TestHandlerPanicIsBounded: a handler that panics on one message does not
// crash the process; the message is delivered MaxPanicDeliveries times, then
// terminated, the panics are counted, and the next message is handled.
func TestHandlerPanicIsBounded(t *testing.T) {
	ctx := t.Context()
	js, pub := nodeN(t, "worker-1")
	var mu sync.Mutex
	poisoned, good := 0, 0
	const durable = "panics"
	m := newTestMetrics(t)
	stop, err := bus.Consume(ctx, js, bus.ConsumerOptions{
		Stream: bus.StreamName("n", bus.StreamProbes), Durable: durable, RetryDelay: 20 * time.Millisecond,
		DeliverPolicy: jetstream.DeliverAllPolicy, Metrics: m,
	}, func(_ context.Context, _ string, e *bus.Envelope) error {
		r, err := bus.DecodeProbeResult(e)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if r.Container == "poison" {
			poisoned++
			var m map[string]int
			m["boom"]++ // a nil map write: a real runtime panic
		}
		good++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	publish := func(p int, container string) {
		t.Helper()
		if err := pub.Publish(ctx, bus.For("n").ProbeResults(p), bus.KindProbeResult, "", &bus.ProbeResult{PodUID: "u", Container: container, Probe: bus.ProbeLiveness, Result: bus.ProbeFailure}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, what, func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			return cond(), fmt.Sprintf("poisoned message handled %d times, good ones %d", poisoned, good)
		})
	}
	publish(0, "poison")
	waitFor("retries", func() bool { return poisoned >= bus.MaxPanicDeliveries })
	// Another subject (a newer message on the same one would make the
	// poisoned one stale): handled while the poisoned one is retried.
	publish(1, "fine")
	waitFor("the other message", func() bool { return good == 1 })
	// Terminated: nothing left pending or waiting for an ack (a message
	// still retried would stay there).
	waitDrained(t, js, bus.StreamName("n", bus.StreamProbes), durable)
	mu.Lock()
	defer mu.Unlock()
	if poisoned != bus.MaxPanicDeliveries {
		t.Errorf("poisoned message delivered %d times, want %d", poisoned, bus.MaxPanicDeliveries)
	}
	if got := testutil.ToFloat64(m.HandlerPanics.WithLabelValues(durable)); got != bus.MaxPanicDeliveries {
		t.Errorf("panics counted: %v, want %d", got, bus.MaxPanicDeliveries)
	}
}

// TestOvertakenMessageWithOrderedByHandler: a message that reaches the
// consumer after a newer one of its subject (as a redelivery does after a
// NATS server was lost) is dropped as already seen by default, and passed
// on to a handler that orders messages itself (OrderedByHandler).
func TestOvertakenMessageWithOrderedByHandler(t *testing.T) {
	ctx := t.Context()
	js, pub := nodeN(t, "podworkers-a")
	target := bus.For("n").PodStatus(3)
	older, _, err := pub.Seal(bus.KindPodRuntimeStatus, "", &bus.PodRuntimeStatus{UID: "uid-a", Namespace: "ns", Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	newer, _, err := pub.Seal(bus.KindPodRuntimeStatus, "", &bus.PodRuntimeStatus{UID: "uid-b", Namespace: "ns", Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range [][]byte{newer, older} {
		if _, err := js.Publish(ctx, target, data); err != nil {
			t.Fatal(err)
		}
	}
	for _, ordered := range []bool{false, true} {
		var got collected
		opts := bus.ConsumerOptions{Stream: bus.StreamName("n", bus.StreamPodStatus), Durable: fmt.Sprint("overtaken-", ordered), OrderedByHandler: ordered}
		stop, err := bus.Consume(ctx, js, opts, got.handler)
		if err != nil {
			t.Fatal(err)
		}
		waitDrained(t, js, opts.Stream, opts.Durable)
		stop()
		want := 1
		if ordered {
			want = 2
		}
		if n := got.len(); n != want {
			t.Errorf("OrderedByHandler %v: handled %d messages, want %d", ordered, n, want)
		}
	}
}
