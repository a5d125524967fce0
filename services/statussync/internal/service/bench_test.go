package service

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/bus"
)

// BenchmarkCreateToReady: API writes per pod for create → Running and Ready,
// with the runtime reporting ContainerCreating and then Running a few
// milliseconds later as the sim runtime does (target: at most 2 writes).
func BenchmarkCreateToReady(b *testing.B) {
	h := newHarness(b, harnessOptions{coalesceDelay: 100 * time.Millisecond, log: zap.NewNop()})
	const batch = 25
	b.ResetTimer()
	pods := 0
	for done := 0; done < b.N; done += batch {
		n := min(batch, b.N-done)
		var wg sync.WaitGroup
		created := make([]*corev1.Pod, n)
		for i := 0; i < n; i++ {
			created[i] = h.createPod(fmt.Sprintf("bench-%d", done+i), nil)
		}
		for i, p := range created {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h.publishStatusAsync(runtimeStatus(p, waitingC("app")))
				time.Sleep(5 * time.Millisecond) // the runtime starting the container
				rs := runtimeStatus(p, runningC("app", fmt.Sprintf("sim://bench-%d", done+i), 0))
				rs.PodIP = "10.2.0.1"
				h.publishStatusAsync(rs)
			}()
		}
		wg.Wait()
		for _, p := range created {
			h.waitPod(p.Name, "ready", func(p *corev1.Pod) error { return wantCondition(p, corev1.PodReady, corev1.ConditionTrue) })
		}
		pods += n
	}
	b.StopTimer()
	b.ReportMetric(float64(h.requests.allStatusPatches())/float64(pods), "writes/pod")
}

// BenchmarkSteadyStatePatches: patches per second while running pods keep
// changing (container restarts), with the default coalescing.
func BenchmarkSteadyStatePatches(b *testing.B) {
	h := newHarness(b, harnessOptions{coalesceDelay: 100 * time.Millisecond, log: zap.NewNop()})
	const podCount = 50
	pods := make([]*corev1.Pod, podCount)
	for i := range pods {
		pods[i] = h.createPod(fmt.Sprintf("steady-%d", i), nil)
		h.publishStatusAsync(runtimeStatus(pods[i], runningC("app", fmt.Sprintf("sim://steady-%d-0", i), 0)))
	}
	for _, p := range pods {
		h.waitPod(p.Name, "ready", func(p *corev1.Pod) error { return wantCondition(p, corev1.PodReady, corev1.ConditionTrue) })
	}
	before := h.requests.allStatusPatches()
	restarts := make([]int32, podCount)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		k := i % podCount
		restarts[k]++
		h.publishStatusAsync(runtimeStatus(pods[k], runningC("app", fmt.Sprintf("sim://steady-%d-%d", k, restarts[k]), restarts[k])))
	}
	if err := h.workers.Flush(h.ctx); err != nil {
		b.Fatal(err)
	}
	for k, p := range pods {
		want := restarts[k]
		h.waitPod(p.Name, "last restart", func(p *corev1.Pod) error {
			if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].RestartCount != want {
				return fmt.Errorf("not yet")
			}
			return nil
		})
	}
	elapsed := time.Since(start)
	b.StopTimer()
	patches := h.requests.allStatusPatches() - before
	b.ReportMetric(float64(patches)/elapsed.Seconds(), "patches/s")
	b.ReportMetric(float64(b.N)/float64(max(patches, 1)), "changes/patch")
}

func (h *harness) publishStatusAsync(rs *bus.PodRuntimeStatus) {
	if _, err := h.workers.PublishAsync(context.Background(), bus.For(h.node).PodStatus(h.partition(rs.UID)), bus.KindPodRuntimeStatus, "", rs); err != nil {
		h.t.Error(err)
	}
}
