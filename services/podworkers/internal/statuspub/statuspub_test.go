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

// A burst of changes to one pod goes out as few messages, the last one
// being the newest status; unowned partitions are not spoken for.
func TestBurstIsCoalesced(t *testing.T) {
	const node = "coalesce"
	n := testenv.NATSForTest(t)
	nc, js := n.Connect(t)
	ctx := context.Background()
	if err := bus.EnsureStreams(ctx, js, node); err != nil {
		t.Fatal(err)
	}
	var owned atomic.Bool
	owned.Store(true)
	p := New(bus.NewPublisher(nc, js, node, "podworkers-test"), 1, func(int) bool { return owned.Load() }, zap.NewNop())
	p.SetWindow(100 * time.Millisecond)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); p.Run(rctx) }()
	defer func() { cancel(); <-done }()

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
	for wait := time.Now().Add(10 * time.Second); p.Sent() < len(got); {
		if time.Now().After(wait) {
			t.Fatalf("sent count %d, %d messages arrived", p.Sent(), len(got))
		}
		time.Sleep(5 * time.Millisecond)
	}
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
	if err := p.HandOver(context.Background(), 0, true); err != nil {
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
	if err := p.HandOver(context.Background(), 0, false); err != nil {
		t.Fatal(err)
	}
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
