package nodestatus

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/splitlet/splitlet/services/nodehb/internal/eviction"
)

func TestAllocatable(t *testing.T) {
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"), corev1.ResourcePods: resource.MustParse("110")}
	hard := func(s string) []eviction.Threshold {
		t.Helper()
		ts, err := eviction.Parse(s, "", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	got := Allocatable(capacity, hard(DefaultEvictionHard),
		corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
		corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi"), "example.com/gpu": resource.MustParse("1")})
	for name, want := range map[corev1.ResourceName]string{corev1.ResourceCPU: "3500m", corev1.ResourceMemory: "6556Mi",
		corev1.ResourceEphemeralStorage: "90Gi", corev1.ResourcePods: "110"} {
		if q := got[name]; q.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("%s = %s, want %s", name, q.String(), want)
		}
	}
	if _, ok := got["example.com/gpu"]; ok {
		t.Error("a reservation of a resource the node lacks made it appear")
	}
	if q := capacity[corev1.ResourceMemory]; q.Cmp(resource.MustParse("8Gi")) != 0 {
		t.Errorf("capacity changed: %s", q.String())
	}
	// more reserved than there is: zero, not negative.
	got = Allocatable(capacity, hard("memory.available<16Gi"))
	if q := got[corev1.ResourceMemory]; q.Sign() != 0 {
		t.Errorf("memory = %s, want 0", q.String())
	}
	for _, bad := range []string{"memory.available>1Gi", "memory.free<1Gi", "nodefs.available<150%", "memory.available<lots"} {
		if _, err := eviction.Parse(bad, "", nil, nil); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
