package nodestatus

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestAllocatable(t *testing.T) {
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"), corev1.ResourcePods: resource.MustParse("110")}
	got, err := Allocatable(capacity, DefaultEvictionHard,
		corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
		corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi"), "example.com/gpu": resource.MustParse("1")})
	if err != nil {
		t.Fatal(err)
	}
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
	got, err = Allocatable(capacity, "memory.available<16Gi")
	if err != nil {
		t.Fatal(err)
	}
	if q := got[corev1.ResourceMemory]; q.Sign() != 0 {
		t.Errorf("memory = %s, want 0", q.String())
	}
	for _, bad := range []string{"memory.available>1Gi", "memory.free<1Gi", "nodefs.available<150%", "memory.available<lots"} {
		if _, err := Allocatable(capacity, bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
