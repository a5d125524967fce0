package statuspub

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
)

// runPublisher runs a publisher of one partition, owned until the test says
// otherwise, on a node's streams of a test NATS server.
func runPublisher(t *testing.T, node string, window time.Duration) (*Publisher, jetstream.JetStream, *atomic.Bool) {
	t.Helper()
	n := testenv.NATSForTest(t)
	nc, js := n.Connect(t)
	if err := bus.EnsureStreams(context.Background(), js, node); err != nil {
		t.Fatal(err)
	}
	owned := new(atomic.Bool)
	owned.Store(true)
	p := New(bus.NewPublisher(nc, js, node, "podworkers-test"), 1, func(int) bool { return owned.Load() }, zap.NewNop())
	p.SetWindow(window)
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(rctx) }()
	t.Cleanup(func() { cancel(); stopped(t, done) })
	return p, js, owned
}

// stopped waits up to 10 s for a cancelled publisher's Run to return.
func stopped(t *testing.T, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Error("the publisher's Run did not return within 10 s of its cancel")
	}
}

// A burst of changes to one pod goes out as few messages, the last one
// being the newest status; unowned partitions are not spoken for.
func TestBurstIsCoalesced(t *testing.T) {
	const node = "coalesce"
	ctx := t.Context()
	p, js, owned := runPublisher(t, node, 100*time.Millisecond)

	for i := 0; i < 200; i++ {
		p.Set(&bus.PodRuntimeStatus{UID: "u1", Namespace: "ns", Name: "a", Message: fmt.Sprint(i)})
	}
	var got []*bus.PodRuntimeStatus
	cons, err := js.OrderedConsumer(ctx, bus.StreamName(node, bus.StreamPodStatus), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(got) == 0 || got[len(got)-1].Message != "199" {
		if time.Now().After(deadline) {
			t.Fatalf("newest status never arrived; got %d messages", len(got))
		}
		m, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if err != nil {
			continue
		}
		e, err := bus.Decode(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		st, err := bus.DecodePodRuntimeStatus(e)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, st)
	}
	if len(got) > 10 {
		t.Fatalf("a burst of 200 changes became %d messages", len(got))
	}
	// the publisher counts the send once the stream acknowledged it.
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("a sent count of the %d messages that arrived", len(got)), func() (bool, string) {
		n := p.Sent()
		return n >= len(got), fmt.Sprintf("sent %d", n)
	})
	// the same status again is not re-sent; an unowned partition is silent.
	p.Set(&bus.PodRuntimeStatus{UID: "u1", Namespace: "ns", Name: "a", Message: "199"})
	owned.Store(false)
	p.Set(&bus.PodRuntimeStatus{UID: "u1", Namespace: "ns", Name: "a", Message: "unowned"})
	sent := p.Sent()
	if _, err := cons.Next(jetstream.FetchMaxWait(500 * time.Millisecond)); err == nil {
		t.Fatal("a status was published for an unowned partition or re-sent unchanged")
	}
	if p.Sent() != sent {
		t.Fatalf("sent count moved from %d to %d", sent, p.Sent())
	}
	// a pod forgotten right after its last change still gets it out.
	owned.Store(true)
	p.Set(&bus.PodRuntimeStatus{UID: "u2", Namespace: "ns", Name: "b", Terminated: true})
	p.Forget("u2")
	deadline = time.Now().Add(10 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatal("the last status of a forgotten pod was dropped")
		}
		m, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if err != nil {
			continue
		}
		e, _ := bus.Decode(m.Data())
		if st, err := bus.DecodePodRuntimeStatus(e); err == nil && st.UID == "u2" && st.Terminated {
			break
		}
	}
	// a hand-over says the partition's pending statuses while the replica
	// still holds the lease (even though it no longer acts on it), then
	// drops them; a lost lease drops them unsaid.
	owned.Store(false)
	p.Set(&bus.PodRuntimeStatus{UID: "u3", Namespace: "ns", Name: "c", Message: "last word"})
	if err := p.HandOver(t.Context(), 0, true); err != nil {
		t.Fatal(err)
	}
	for deadline = time.Now().Add(10 * time.Second); ; {
		if time.Now().After(deadline) {
			t.Fatal("the hand-over did not publish the pending status")
		}
		m, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if err != nil {
			continue
		}
		e, _ := bus.Decode(m.Data())
		if st, err := bus.DecodePodRuntimeStatus(e); err == nil && st.UID == "u3" && st.Message == "last word" {
			break
		}
	}
	p.Set(&bus.PodRuntimeStatus{UID: "u4", Namespace: "ns", Name: "d", Message: "lost"})
	if err := p.HandOver(t.Context(), 0, false); err != nil {
		t.Fatal(err)
	}
	p.Open(0) // taken again
	owned.Store(true)
	p.Set(&bus.PodRuntimeStatus{UID: "u5", Namespace: "ns", Name: "e", Message: "after"})
	for deadline = time.Now().Add(10 * time.Second); ; {
		if time.Now().After(deadline) {
			t.Fatal("no status after the hand-over")
		}
		m, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if err != nil {
			continue
		}
		e, _ := bus.Decode(m.Data())
		st, err := bus.DecodePodRuntimeStatus(e)
		if err == nil && st.UID == "u4" {
			t.Fatal("a status dropped by a lost lease was published")
		}
		if err == nil && st.UID == "u5" {
			break
		}
	}
}

// A status the stream refuses is not counted as sent and goes out again
// once the stream takes it, although the batch it was in completed.
func TestRefusedPublishIsRetried(t *testing.T) {
	const node = "refused"
	n := testenv.NATSForTest(t)
	nc, js := n.Connect(t)
	ctx := t.Context()
	if err := bus.EnsureStreams(ctx, js, node); err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, bus.StreamName(node, bus.StreamPodStatus))
	if err != nil {
		t.Fatal(err)
	}
	limit := func(size int32) {
		t.Helper()
		cfg := stream.CachedInfo().Config
		cfg.MaxMsgSize = size
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	// a small status fits, a big one is refused by the stream (its
	// acknowledgement is an error; the client-side publish succeeds).
	limit(4096)
	p := New(bus.NewPublisher(nc, js, node, "podworkers-test"), 1, func(int) bool { return true }, zap.NewNop())
	p.SetWindow(20 * time.Millisecond)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); p.Run(rctx) }()
	defer func() { cancel(); stopped(t, done) }()
	big := make([]byte, 8192)
	for i := range big {
		big[i] = 'x'
	}
	p.Set(&bus.PodRuntimeStatus{UID: "small", Namespace: "ns", Name: "s"})
	p.Set(&bus.PodRuntimeStatus{UID: "big", Namespace: "ns", Name: "b", Message: string(big)})
	subject := bus.For(node).PodStatus(0)
	lastOf := func() int {
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
		if err != nil {
			t.Fatal(err)
		}
		return int(info.State.Msgs)
	}
	testenv.Eventually(t, 10*time.Second, "the small status sent", func() (bool, string) {
		return p.Sent() >= 1 && lastOf() >= 1, fmt.Sprintf("sent %d", p.Sent())
	})
	// several flushes later the refused one is still not counted.
	for wait := time.Now().Add(300 * time.Millisecond); time.Now().Before(wait); time.Sleep(20 * time.Millisecond) {
		if p.Sent() != 1 {
			t.Fatalf("sent count %d with the big status refused by the stream", p.Sent())
		}
	}
	limit(64 * 1024)
	testenv.Eventually(t, 15*time.Second, "the refused status sent again", func() (bool, string) {
		return p.Sent() >= 2, fmt.Sprintf("sent %d, stream holds %d", p.Sent(), lastOf())
	})
	if got := lastOf(); got != 2 {
		t.Fatalf("stream holds %d statuses, want 2", got)
	}
}

// What a worker says of a pod after its partition was handed over (the end
// of a process-local kill) never goes out, not even when the replica takes
// the partition back later: only what it says after that does.
func TestHandedOverPartitionStaysSilentAfterReacquire(t *testing.T) {
	const node = "handback"
	ctx := t.Context()
	p, js, owned := runPublisher(t, node, 10*time.Millisecond)
	cons, err := js.OrderedConsumer(ctx, bus.StreamName(node, bus.StreamPodStatus), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	next := func() (*bus.PodRuntimeStatus, error) {
		m, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, err
		}
		e, err := bus.Decode(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		return bus.DecodePodRuntimeStatus(e)
	}

	p.Set(&bus.PodRuntimeStatus{UID: "u1", Namespace: "ns", Name: "a", Message: "running"})
	if st, err := next(); err != nil || st.Message != "running" {
		t.Fatalf("first status: %v %v", st, err)
	}
	// release: the partition stops being owned, then is handed over; the
	// kill's last word arrives after the hand-over.
	owned.Store(false)
	if err := p.HandOver(ctx, 0, false); err != nil {
		t.Fatal(err)
	}
	p.Set(&bus.PodRuntimeStatus{UID: "u1", Namespace: "ns", Name: "a", Message: "killed", Terminated: true})
	// taken back: the late status must not go out.
	p.Open(0)
	owned.Store(true)
	p.Set(&bus.PodRuntimeStatus{UID: "u2", Namespace: "ns", Name: "b", Message: "other"})
	st, err := next()
	if err != nil {
		t.Fatalf("no status after the partition was taken back: %v", err)
	}
	if st.UID != "u2" {
		t.Fatalf("a status said after the hand-over went out when the partition was taken back: %+v", st)
	}
	if st, err := next(); err == nil {
		t.Fatalf("unexpected status: %+v", st)
	}
	p.Set(&bus.PodRuntimeStatus{UID: "u1", Namespace: "ns", Name: "a", Message: "running again"})
	if st, err := next(); err != nil || st.Message != "running again" {
		t.Fatalf("a status after the partition was taken back: %v %v", st, err)
	}
}
