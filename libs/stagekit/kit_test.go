package stagekit

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
)

// statuses records the statuses handed on, as "<uid> <source> <seq>".
type statuses struct {
	mu  sync.Mutex
	got []string
}

func (s *statuses) PodStatus(_ context.Context, source string, seq uint64, st *bus.PodRuntimeStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, fmt.Sprintf("%s %s %d", st.UID, source, seq))
}

func (s *statuses) has(v string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.got, v)
}

// publish sends one message with the given seq, as its source would.
func publish(t *testing.T, js jetstream.JetStream, subject string, kind bus.Kind, source string, op bus.Op, seq uint64, payload any) {
	t.Helper()
	e, err := bus.NewEnvelope(kind, "n", source, op, payload)
	if err != nil {
		t.Fatal(err)
	}
	e.Seq, e.SentAt = seq, time.Now()
	data, err := bus.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(t.Context(), subject, data); err != nil {
		t.Fatal(err)
	}
}

func startKit(t *testing.T, js jetstream.JetStream, h PodHandler, st StatusHandler) *Kit {
	t.Helper()
	k := New(js, "n", h, WithStatus(st), WithLogger(zaptest.NewLogger(t)))
	k.Start()
	t.Cleanup(k.Stop)
	testenv.EventuallyTrue(t, 10*time.Second, "the kit consumes the bus", func() bool { return k.Ready() == nil })
	return k
}

// Against a real NATS server: a pod update whose seq is not above its
// source's last on the subject is ignored; statuses are handed on with
// their source and seq; a kit started again reads the streams from their
// start (its pod set lives in memory), so it holds every pod again.
func TestStaleVersionIgnoredAndHistoryReplayed(t *testing.T) {
	_, js := testenv.NATSForTest(t).Connect(t)
	c, st := &calls{}, &statuses{}
	k := startKit(t, js, c, st)
	subjects := bus.For("n")
	pod := func(uid, image string) *bus.PodUpdate {
		p := pods(uid)
		p[0].Spec.Containers = []corev1.Container{{Name: "c", Image: image}}
		return &bus.PodUpdate{Pods: p}
	}
	publish(t, js, subjects.PodUpdates(0), bus.KindPodUpdate, "api", bus.OpAdd, 100, pod("a", "v1"))
	publish(t, js, subjects.PodUpdates(0), bus.KindPodUpdate, "api", bus.OpUpdate, 100, pod("a", "again"))
	publish(t, js, subjects.PodUpdates(0), bus.KindPodUpdate, "api", bus.OpUpdate, 50, pod("a", "stale"))
	publish(t, js, subjects.PodUpdates(0), bus.KindPodUpdate, "api", bus.OpRemove, 99, pod("a", "stale"))
	publish(t, js, subjects.PodUpdates(0), bus.KindPodUpdate, "api", bus.OpAdd, 101, pod("marker", "v1"))
	publish(t, js, subjects.PodStatus(0), bus.KindPodRuntimeStatus, "podworkers-1", "", 7,
		&bus.PodRuntimeStatus{UID: "a", Namespace: "ns", Name: "a", Phase: corev1.PodRunning})

	testenv.EventuallyTrue(t, 10*time.Second, "the marker pod added", func() bool { return k.Has("marker") })
	want(t, c, "ADD a, stale UPDATE and REMOVE of a, ADD marker", "added a", "added marker")
	if !k.Has("a") || k.Len() != 2 {
		t.Fatalf("set holds %d pods (a: %v), want a and marker", k.Len(), k.Has("a"))
	}
	testenv.EventuallyTrue(t, 10*time.Second, "a's status handed on", func() bool { return st.has("a podworkers-1 7") })

	k.Stop()
	c2, st2 := &calls{}, &statuses{}
	k2 := startKit(t, js, c2, st2)
	testenv.EventuallyTrue(t, 10*time.Second, "the restarted kit holds both pods", func() bool { return k2.Len() == 2 })
	want(t, c2, "the replay", "added a", "added marker")
	testenv.EventuallyTrue(t, 10*time.Second, "a's status replayed", func() bool { return st2.has("a podworkers-1 7") })
}

// A SET replaces the set on the bus too, and a shadow kit consumes with
// durables of its own, beside the live one.
func TestShadowHasItsOwnDurables(t *testing.T) {
	_, js := testenv.NATSForTest(t).Connect(t)
	live, shadow := &calls{}, &calls{}
	kl := startKit(t, js, live, &statuses{})
	ks := New(js, "n", shadow, WithShadow(true), WithLogger(zaptest.NewLogger(t)))
	ks.Start()
	t.Cleanup(ks.Stop)
	testenv.EventuallyTrue(t, 10*time.Second, "the shadow consumes the bus", func() bool { return ks.Ready() == nil })
	subjects := bus.For("n")
	publish(t, js, subjects.PodUpdates(3), bus.KindPodUpdate, "api", bus.OpAdd, 1, &bus.PodUpdate{Pods: pods("a", "b")})
	publish(t, js, subjects.PodUpdates(3), bus.KindPodUpdate, "api", bus.OpSet, 2, &bus.PodUpdate{Pods: pods("b")})
	for _, k := range []*Kit{kl, ks} {
		testenv.EventuallyTrue(t, 10*time.Second, "the SET applied", func() bool { return k.Len() == 1 && k.Has("b") })
	}
	want(t, live, "the live kit", "added a", "added b", "removed a", "updated b")
	want(t, shadow, "the shadow kit", "added a", "added b", "removed a", "updated b")
	if _, err := js.Consumer(t.Context(), bus.StreamName("n", bus.StreamPodUpdates), bus.ShadowDurable(bus.DurableProberPodUpdates)); err != nil {
		t.Fatalf("the shadow's durable: %v", err)
	}
	if _, err := js.Consumer(t.Context(), bus.StreamName("n", bus.StreamPodStatus), bus.ShadowDurable(bus.DurableProberPodStatus)); err == nil {
		t.Fatal("a shadow without a status handler made a status consumer")
	}
}
