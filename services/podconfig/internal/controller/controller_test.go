package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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
	testenv.EventuallyTrue(t, 10*time.Second, "a publish failure recorded without streams", func() bool { return testutil.ToFloat64(c.failures) > 0 })
	sctx, scancel := context.WithTimeout(t.Context(), 10*time.Second)
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
	testenv.Eventually(t, 15*time.Second, "after the streams appeared, a SET with the pod on "+want+" and SourcesReady", func() (bool, string) {
		var set, ready bool
		if e := last(bus.StreamPodUpdates, want); e != nil && e.Op == bus.OpSet {
			pu, err := bus.DecodePodUpdate(e)
			set = err == nil && len(pu.Pods) == 1 && pu.Pods[0].UID == "uid-retry"
		}
		if e := last(bus.StreamState, bus.For(node).SourcesReady()); e != nil {
			sr, err := bus.DecodeSourcesReady(e)
			ready = err == nil && sr.AllReady
		}
		return set && ready, fmt.Sprintf("SET %v, SourcesReady %v", set, ready)
	})
}

func podsN(prefix string, n int) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	for i := range out {
		out[i] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: prefix, UID: "x"}}
	}
	return out
}

// TestBatchCoalescing: consecutive operations of one kind on one (source,
// partition) merge up to the bound; another kind, a SET, or another
// partition starts a new message, so every pod's order is kept.
func TestBatchCoalescing(t *testing.T) {
	var b batch
	b.add(merge.Message{Source: "api", Op: bus.OpAdd, Partition: 0, Pods: podsN("a", 150)})
	b.add(merge.Message{Source: "api", Op: bus.OpAdd, Partition: 1, Pods: podsN("b", 1)})
	b.add(merge.Message{Source: "api", Op: bus.OpAdd, Partition: 0, Pods: podsN("a", 100)}) // 50 fill, 50 new
	b.add(merge.Message{Source: "api", Op: bus.OpUpdate, Partition: 0, Pods: podsN("u", 1)})
	b.add(merge.Message{Source: "api", Op: bus.OpAdd, Partition: 0, Pods: podsN("a", 1)})
	b.add(merge.Message{Source: "file", Op: bus.OpAdd, Partition: 0, Pods: podsN("f", 1)})
	b.set("api", 1, nil)
	b.add(merge.Message{Source: "api", Op: bus.OpAdd, Partition: 1, Pods: podsN("b", 1)})
	var got []string
	for _, m := range b.msgs {
		got = append(got, fmt.Sprintf("%s/%s/%d:%d", m.Source, m.Op, m.Partition, len(m.Pods)))
	}
	want := "[api/ADD/0:200 api/ADD/1:1 api/ADD/0:50 api/UPDATE/0:1 api/ADD/0:1 file/ADD/0:1 api/SET/1:0 api/ADD/1:1]"
	if fmt.Sprint(got) != want {
		t.Fatalf("got %v\nwant %s", got, want)
	}
}

// TestOversizedBatchIsSplit: a batch larger than the server's max_payload
// leaves as several messages, every pod delivered once.
func TestOversizedBatchIsSplit(t *testing.T) {
	const node = "node-split"
	nc, js := smallPayloadBus(t, node)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	pods := runPadded(t, nc, node, time.Hour, bus.OpAdd)

	seen := map[types.UID]int{}
	msgs := 0
	cons, err := js.OrderedConsumer(ctx, bus.StreamName(node, bus.StreamPodUpdates), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for len(seen) < len(pods) {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("%d of %d pods after %d messages: %v", len(seen), len(pods), msgs, err)
		}
		e, err := bus.Decode(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		pu, err := bus.DecodePodUpdate(e)
		if err != nil {
			t.Fatal(err)
		}
		msgs++
		for _, p := range pu.Pods {
			seen[p.UID]++
		}
	}
	if msgs < 5 {
		t.Fatalf("150 pods of 1 KB in %d messages under a 32 KB max_payload", msgs)
	}
	for uid, n := range seen {
		if n != 1 {
			t.Fatalf("pod %s delivered %d times", uid, n)
		}
	}
}

// smallPayloadBus is a NATS server with a 32 KiB max_payload and the
// node's streams.
func smallPayloadBus(t *testing.T, node string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), MaxPayload: 32 * 1024, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := bus.EnsureStreams(ctx, js, node); err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// TestOversizedSetIsSentInParts: the periodic SET of a partition larger
// than max_payload leaves as SETPARTs of one snapshot, which a receiver
// (bus.Snapshots) puts back together into a SET of every pod, once.
func TestOversizedSetIsSentInParts(t *testing.T) {
	const node = "node-setpart"
	nc, js := smallPayloadBus(t, node)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// a SET marks the source seen: its pods are then re-sent every period.
	pods := runPadded(t, nc, node, 300*time.Millisecond, bus.OpSet)

	cons, err := js.OrderedConsumer(ctx, bus.StreamName(node, bus.StreamPodUpdates), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	snaps := bus.NewSnapshots()
	parts := 0
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("no complete SET after %d SETPARTs: %v", parts, err)
		}
		e, err := bus.Decode(m.Data())
		if err != nil {
			t.Fatal(err)
		}
		pu, err := bus.DecodePodUpdate(e)
		if err != nil {
			t.Fatal(err)
		}
		if e.Op == bus.OpSet {
			t.Fatalf("a SET of %d pods in one message under a 32 KiB max_payload", len(pu.Pods))
		}
		if e.Op != bus.OpSetPart {
			continue
		}
		parts++
		op, got, apply := snaps.Resolve(m.Subject(), e, pu)
		if !apply {
			continue
		}
		seen := map[types.UID]int{}
		for _, p := range got {
			seen[p.UID]++
		}
		if op != bus.OpSet || len(got) != len(pods) || len(seen) != len(pods) {
			t.Fatalf("assembled %s of %d pods (%d distinct) from %d parts, want SET of %d", op, len(got), len(seen), parts, len(pods))
		}
		return
	}
}

// runPadded runs a controller of one partition with the given snapshot
// period, submits 150 pods of about 1 KB each from the api source with op,
// and returns them.
func runPadded(t *testing.T, nc *nats.Conn, node string, period time.Duration, op bus.Op) []*corev1.Pod {
	t.Helper()
	c, err := New(nc, node, 1, WithSnapshotPeriod(period))
	if err != nil {
		t.Fatal(err)
	}
	c.AddSource(merge.SourceAPI)
	var pods []*corev1.Pod
	for i := 0; i < 150; i++ {
		pods = append(pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: "default",
			UID: types.UID(fmt.Sprintf("uid-%d", i)), Annotations: map[string]string{"pad": strings.Repeat("x", 1000)}}})
	}
	c.Submit(merge.Update{Source: merge.SourceAPI, Op: op, Pods: pods})
	rctx, rcancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(rctx); close(done) }()
	t.Cleanup(func() { rcancel(); <-done })
	return pods
}

// TestReconcileHasItsOwnSubject: a change of a pod's status
// alone leaves as a RECONCILE on its partition's reconcile subject. A
// durable consumer of PodUpdatesAll (the prober's and statussync's filter)
// is never sent it; one of the partition's two subjects (the filter of the
// partition's owner in the pod workers) gets the pod's ADD, UPDATE,
// RECONCILE and UPDATE, in that order.
func TestReconcileHasItsOwnSubject(t *testing.T) {
	const node, partitions = "node-reconcile", 4
	n := testenv.NATSForTest(t)
	nc, js := n.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.EnsureStreams(ctx, js, node); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "uid-reconcile"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
	part := bus.Partition(string(pod.UID), partitions)
	s := bus.For(node)

	type message struct {
		subject string
		op      bus.Op
	}
	var mu sync.Mutex
	got := map[string][]message{}
	for durable, filters := range map[string][]string{
		"every-partition": {s.PodUpdatesAll()},
		"owner":           s.PartitionPodUpdates(part),
	} {
		stop, err := bus.Consume(ctx, js, bus.ConsumerOptions{Stream: bus.StreamName(node, bus.StreamPodUpdates), Durable: durable, Filters: filters},
			func(_ context.Context, subject string, e *bus.Envelope) error {
				if e.Op == bus.OpSet {
					return nil
				}
				mu.Lock()
				defer mu.Unlock()
				got[durable] = append(got[durable], message{subject, e.Op})
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
	}

	c, err := New(nc, node, partitions, WithSnapshotPeriod(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	c.AddSource(merge.SourceAPI)
	rctx, rcancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(rctx); close(done) }()
	defer func() { rcancel(); <-done }()
	submit := func(op bus.Op, mod func(*corev1.Pod)) {
		mod(pod)
		// the storage takes the pods it is given over: a copy each time.
		c.Submit(merge.Update{Source: merge.SourceAPI, Op: op, Pods: []*corev1.Pod{pod.DeepCopy()}})
	}
	c.Submit(merge.Update{Source: merge.SourceAPI, Op: merge.OpSeen})
	submit(bus.OpAdd, func(*corev1.Pod) {})
	submit(bus.OpUpdate, func(p *corev1.Pod) { p.Labels = map[string]string{"v": "1"} })
	submit(bus.OpUpdate, func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning })
	submit(bus.OpUpdate, func(p *corev1.Pod) { p.Labels = map[string]string{"v": "2"} })

	updates, reconciles := s.PodUpdates(part), s.PodReconciles(part)
	want := map[string][]message{
		"every-partition": {{updates, bus.OpAdd}, {updates, bus.OpUpdate}, {updates, bus.OpUpdate}},
		"owner":           {{updates, bus.OpAdd}, {updates, bus.OpUpdate}, {reconciles, bus.OpReconcile}, {updates, bus.OpUpdate}},
	}
	// Each consumer's last message is the last UPDATE: a RECONCILE sent to
	// it would have come before.
	testenv.Eventually(t, 15*time.Second, "every message on both subjects", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(got["every-partition"]) >= len(want["every-partition"]) && len(got["owner"]) >= len(want["owner"]), fmt.Sprint(got)
	})
	mu.Lock()
	defer mu.Unlock()
	for durable, w := range want {
		if !slices.Equal(got[durable], w) {
			t.Errorf("consumer %s got %v, want %v", durable, got[durable], w)
		}
	}
}

// TestSnapshotSpacing: the configured period on a small node; on a large
// one, snapshots that re-send at most SnapshotPodsPerSecond pods a second.
func TestSnapshotSpacing(t *testing.T) {
	for _, c := range []struct {
		pods int
		want time.Duration
	}{{0, 30 * time.Second}, {3000, 30 * time.Second}, {5000, 50 * time.Second}, {20000, 200 * time.Second}} {
		if got := snapshotSpacing(30*time.Second, c.pods); got != c.want {
			t.Errorf("%d pods: %v, want %v", c.pods, got, c.want)
		}
	}
}
