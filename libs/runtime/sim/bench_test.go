package sim

import (
	"context"
	"fmt"
	goruntime "runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/runtime"
)

// BenchmarkStartPods starts b.N single-container pods (with a planned exit
// an hour away, so each holds a timer) and reports the runtime's memory per
// pod and the containers started per second.
func BenchmarkStartPods(b *testing.B) {
	r := New()
	defer r.Close()
	pods := make([]*corev1.Pod, b.N)
	ann := map[string]string{AnnotationExitAfter: "1h"}
	for i := range pods {
		pods[i] = newPod(fmt.Sprintf("uid-%d", i), ann, "app")
	}
	ctx := context.Background()
	before := heap()
	b.ReportAllocs()
	b.ResetTimer()
	t0 := time.Now()
	for i := range b.N {
		if _, err := r.StartContainer(ctx, pods[i], &pods[i].Spec.Containers[0], 0, runtime.StartOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(t0)
	b.StopTimer()
	b.ReportMetric(float64(heap()-before)/float64(b.N), "bytes/pod")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "containers/s")
	goruntime.KeepAlive(pods)
}

// BenchmarkStartLatencyLimited starts pods concurrently with the start
// latency and per-replica limit of the podworkers benchmark (200 ms, 50 at
// once) and reports containers started per second.
func BenchmarkStartLatencyLimited(b *testing.B) {
	r := New(WithStartLatency(200*time.Millisecond), WithMaxConcurrentStarts(50))
	defer r.Close()
	pods := make([]*corev1.Pod, b.N)
	for i := range pods {
		pods[i] = newPod(fmt.Sprintf("uid-%d", i), nil, "app")
	}
	ctx := context.Background()
	b.ResetTimer()
	t0 := time.Now()
	errs := make(chan error, b.N)
	for i := range b.N {
		go func() {
			_, err := r.StartContainer(ctx, pods[i], &pods[i].Spec.Containers[0], 0, runtime.StartOptions{})
			errs <- err
		}()
	}
	for range b.N {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "containers/s")
}
