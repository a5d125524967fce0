package service

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/runtime"
)

// TestPodStatsCarryWhatTheRankingNeeds: the pod's ephemeral-storage request
// as the scheduler sums it (containers, the larger init container,
// overhead), each container's requests, and its disk figures.
func TestPodStatsCarryWhatTheRankingNeeds(t *testing.T) {
	req := func(kv ...string) corev1.ResourceRequirements {
		rl := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			rl[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return corev1.ResourceRequirements{Requests: rl}
	}
	prio := int32(7)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
		Spec: corev1.PodSpec{Priority: &prio, Overhead: corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("1Mi")},
			InitContainers: []corev1.Container{{Name: "init", Resources: req("ephemeral-storage", "50Mi")}},
			Containers: []corev1.Container{
				{Name: "a", Resources: req("ephemeral-storage", "10Mi", "memory", "64Mi")},
				{Name: "b", Resources: req("ephemeral-storage", "20Mi")},
			}}}
	start := time.Unix(100, 0)
	ps := podStats(pod, []runtime.ContainerStats{
		{Name: "a", StartedAt: start, RootfsUsedBytes: 5, RootfsInodesUsed: 2, LogsUsedBytes: 7, LogsInodesUsed: 1},
		{Name: "b", StartedAt: start.Add(time.Second)},
	})
	if ps.Priority != 7 || ps.EphemeralStorageRequest == nil || ps.EphemeralStorageRequest.String() != "51Mi" {
		t.Fatalf("priority %d, pod request %v; want 7 and 51Mi (max(50Mi, 10Mi+20Mi) + 1Mi)", ps.Priority, ps.EphemeralStorageRequest)
	}
	a := ps.Containers[0]
	if a.RootfsUsedBytes != 5 || a.RootfsInodesUsed != 2 || a.LogsUsedBytes != 7 || a.LogsInodesUsed != 1 ||
		a.EphemeralStorageRequest.String() != "10Mi" || a.MemoryRequest.String() != "64Mi" || !ps.StartTime.Time.Equal(start) {
		t.Fatalf("container a %+v, start %v", a, ps.StartTime)
	}
	if b := ps.Containers[1]; b.MemoryRequest != nil || b.EphemeralStorageRequest.String() != "20Mi" {
		t.Fatalf("container b %+v", b)
	}
}
