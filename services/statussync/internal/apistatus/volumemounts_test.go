package apistatus

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// The mounts the pod workers report for a container (status.volumeMounts,
// their recursive read-only modes resolved) reach the API status as they
// are.
func TestContainerStatusKeepsVolumeMounts(t *testing.T) {
	disabled := corev1.RecursiveReadOnlyDisabled
	mounts := []corev1.VolumeMountStatus{{Name: "mnt", MountPath: "/ro", ReadOnly: true, RecursiveReadOnly: &disabled}, {Name: "mnt", MountPath: "/rw"}}
	specs := []corev1.Container{{Name: "c", Image: "img"}}
	rs := []corev1.ContainerStatus{{Name: "c", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}, VolumeMounts: mounts}}
	got := containerStatuses(specs, rs, nil, false, false)
	if len(got) != 1 || !equality.Semantic.DeepEqual(got[0].VolumeMounts, mounts) {
		t.Fatalf("volume mounts %+v, want %+v", got, mounts)
	}
	got[0].VolumeMounts[0].Name = "changed"
	if rs[0].VolumeMounts[0].Name != "mnt" {
		t.Error("the status shares the runtime status's mounts")
	}
}
