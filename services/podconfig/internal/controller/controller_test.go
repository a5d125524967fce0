package controller

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/services/podconfig/internal/merge"
)

// TestUnacknowledgedPublishIsResentAsSet: while the bus has no streams every
// publish fails; the update is not lost: once the streams exist, the pod's
// partition is re-sent as a SET holding it, and SourcesReady is published.
func TestUnacknowledgedPublishIsResentAsSet(t *testing.T) {
	const node = "node-retry"
	n := testenv.NATSForTest(t)
	nc, js := n.Connect(t)
	c, err := New(nc, node, 4, WithSnapshotPeriod(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	c.AddSource(merge.SourceAPI)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "uid-retry"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
	c.Submit(merge.Update{Source: merge.SourceAPI, Op: merge.OpSeen})
	c.Submit(merge.Update{Source: merge.SourceAPI, Op: bus.OpAdd, Pods: []*corev1.Pod{pod}})
	// No stream takes the ADD: the publish fails.
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(c.failures) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no publish failure recorded without streams")
		}
		time.Sleep(10 * time.Millisecond)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := bus.EnsureStreams(sctx, js, node); err != nil {
		t.Fatal(err)
	}
	want := bus.For(node).PodUpdates(bus.Partition("uid-retry", 4))
	last := func(stream, subject string) *bus.Envelope {
		st, err := js.Stream(sctx, bus.StreamName(node, stream))
		if err != nil {
			return nil
		}
		m, err := st.GetLastMsgForSubject(sctx, subject)
		if err != nil {
			return nil
		}
		e, err := bus.Decode(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	deadline = time.Now().Add(15 * time.Second)
	for {
		var set, ready bool
		if e := last(bus.StreamPodUpdates, want); e != nil && e.Op == bus.OpSet {
			pu, err := bus.DecodePodUpdate(e)
			set = err == nil && len(pu.Pods) == 1 && pu.Pods[0].UID == "uid-retry"
		}
		if e := last(bus.StreamState, bus.For(node).SourcesReady()); e != nil {
			sr, err := bus.DecodeSourcesReady(e)
			ready = err == nil && sr.AllReady
		}
		if set && ready {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the streams appeared: SET with the pod on %s %v, SourcesReady %v", want, set, ready)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
