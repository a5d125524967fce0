package service

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/testenv"
)

// BenchmarkAPI5000Pods: 5000 pods created in the API server on the node,
// with podconfig running; reports the time from the last create returning
// to the last ADD on the bus, and the PodUpdate messages and pods per second
// from the first create to the last ADD.
func BenchmarkAPI5000Pods(b *testing.B) {
	testenv.SkipShort(b, "etcd and kube-apiserver")
	const count = 5000
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		node := fmt.Sprintf("node-bench-%d", i)
		n := testenv.NATSForTest(b)
		nc, js := n.Connect(b)
		ctx := context.Background()
		if err := bus.EnsureStreams(ctx, js, node); err != nil {
			b.Fatal(err)
		}
		var adds, msgs atomic.Int64
		var lastAdd atomic.Int64
		sub, err := nc.Subscribe(bus.For(node).PodUpdatesAll(), func(m *nats.Msg) {
			e, err := bus.Decode(m.Data)
			if err != nil || e.Op != bus.OpAdd {
				return
			}
			pu, err := bus.DecodePodUpdate(e)
			if err != nil {
				return
			}
			msgs.Add(1)
			if adds.Add(int64(len(pu.Pods))) >= count {
				lastAdd.CompareAndSwap(0, time.Now().UnixNano())
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		r, err := Build(testConfig(), node, bus.DefaultPartitions, zap.NewNop(), cp.Clientset(), nil, nc, js, nil, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := r.Start(ctx); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute)
		for r.Ready(ctx) != nil {
			if time.Now().After(deadline) {
				b.Fatal("podconfig not ready")
			}
			time.Sleep(10 * time.Millisecond)
		}
		fast := rest.CopyConfig(cp.Config)
		fast.QPS, fast.Burst = -1, 0
		cs := kubernetes.NewForConfigOrDie(fast)

		b.StartTimer()
		start := time.Now()
		var lastCreate atomic.Int64
		var wg sync.WaitGroup
		var next atomic.Int64
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					j := next.Add(1) - 1
					if j >= count {
						return
					}
					if _, err := cs.CoreV1().Pods("default").Create(ctx, testPod(fmt.Sprintf("bench-%d-%d", i, j), node), metav1.CreateOptions{}); err != nil {
						b.Error(err)
						return
					}
					now := time.Now().UnixNano()
					for {
						old := lastCreate.Load()
						if now <= old || lastCreate.CompareAndSwap(old, now) {
							break
						}
					}
				}
			}()
		}
		wg.Wait()
		deadline = time.Now().Add(2 * time.Minute)
		for lastAdd.Load() == 0 {
			if time.Now().After(deadline) {
				b.Fatalf("only %d of %d ADDs arrived", adds.Load(), count)
			}
			time.Sleep(time.Millisecond)
		}
		b.StopTimer()
		end := time.Unix(0, lastAdd.Load())
		lag := end.Sub(time.Unix(0, lastCreate.Load()))
		if lag < 0 {
			lag = 0
		}
		window := end.Sub(start).Seconds()
		b.ReportMetric(float64(lag.Microseconds())/1000, "ms-last-create-to-last-ADD")
		b.ReportMetric(float64(msgs.Load())/window, "PodUpdate-msgs/s")
		b.ReportMetric(float64(count)/window, "pods/s")

		_ = sub.Unsubscribe()
		_ = r.Stop(ctx)
		zero := int64(0)
		_ = cs.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero},
			metav1.ListOptions{FieldSelector: kube.NodePodsSelector(node)})
		b.StartTimer()
	}
}
