package controller

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/services/podconfig/internal/merge"
)

const benchPods = 5000

func benchPodList(run int) []*corev1.Pod {
	out := make([]*corev1.Pod, benchPods)
	for i := range out {
		out[i] = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i), Namespace: "default",
				UID: types.UID(fmt.Sprintf("0b9d3c7e-6a2b-4f1e-%04d-%012d", run%10000, i)), ResourceVersion: "1",
				Labels: map[string]string{"app": "bench"}},
			Spec: corev1.PodSpec{NodeName: "bench-node", Containers: []corev1.Container{{
				Name: "main", Image: "busybox:1.36", Command: []string{"sh", "-c", "sleep 3600"}}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending},
		}
	}
	return out
}

// podCounter counts the pods of every PodUpdate on the node's subjects.
func podCounter(b *testing.B, nc *nats.Conn, node string) *atomic.Int64 {
	var n atomic.Int64
	sub, err := nc.Subscribe(bus.For(node).PodUpdatesAll(), func(m *nats.Msg) {
		e, err := bus.Decode(m.Data)
		if err != nil {
			return
		}
		pu, err := bus.DecodePodUpdate(e)
		if err != nil {
			return
		}
		n.Add(int64(len(pu.Pods)))
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sub.Unsubscribe() })
	return &n
}

func waitCount(b *testing.B, n *atomic.Int64, want int64) {
	deadline := time.Now().Add(2 * time.Minute)
	for n.Load() < want {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d pods arrived", n.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func benchBus(b *testing.B) (*nats.Conn, jetstream.JetStream) {
	n := testenv.NATSForTest(b)
	nc, js := n.Connect(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bus.EnsureStreams(ctx, js, "bench-node"); err != nil {
		b.Fatal(err)
	}
	return nc, js
}

// BenchmarkPublish5000: 5000 pods reported one by one (as informer events
// arrive) through the merge loop until every ADD is on the bus.
func BenchmarkPublish5000(b *testing.B) {
	nc, _ := benchBus(b)
	counter := podCounter(b, nc, "bench-node")
	c, err := New(nc, "bench-node", bus.DefaultPartitions, WithSnapshotPeriod(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	c.AddSource(merge.SourceAPI)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		pods := benchPodList(i)
		want := counter.Load() + benchPods
		b.StartTimer()
		for _, p := range pods {
			c.Submit(merge.Update{Source: merge.SourceAPI, Op: bus.OpAdd, Pods: []*corev1.Pod{p}})
		}
		waitCount(b, counter, want)
	}
	b.ReportMetric(float64(b.N*benchPods)/b.Elapsed().Seconds(), "pods/s")
}

// BenchmarkRawJetStream5000 is the peer: the same 5000 pods, each sealed in
// its own PodUpdate envelope and sent with a bare JetStream PublishAsync, no
// merging and no batching.
func BenchmarkRawJetStream5000(b *testing.B) {
	nc, js := benchBus(b)
	counter := podCounter(b, nc, "bench-node")
	pub := bus.NewPublisher(nc, js, "bench-node", "raw")
	subjects := bus.For("bench-node")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		pods := benchPodList(i)
		want := counter.Load() + benchPods
		b.StartTimer()
		for _, p := range pods {
			if _, err := pub.PublishAsync(context.Background(), subjects.PodUpdates(bus.Partition(string(p.UID), bus.DefaultPartitions)),
				bus.KindPodUpdate, bus.OpAdd, &bus.PodUpdate{Pods: []corev1.Pod{*p}}); err != nil {
				b.Fatal(err)
			}
		}
		if err := pub.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
		waitCount(b, counter, want)
	}
	b.ReportMetric(float64(b.N*benchPods)/b.Elapsed().Seconds(), "pods/s")
}
