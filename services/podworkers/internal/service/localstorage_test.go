package service

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Only a pod that sets a local storage limit is measured: the others can
// never be over one.
func TestStorageLimited(t *testing.T) {
	mi := resource.MustParse("1Mi")
	zero := resource.MustParse("0")
	storage := corev1.ResourceList{corev1.ResourceEphemeralStorage: mi}
	emptyDir := func(medium corev1.StorageMedium, limit *resource.Quantity) corev1.Volume {
		return corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: medium, SizeLimit: limit}}}
	}
	cases := []struct {
		name string
		spec corev1.PodSpec
		want bool
	}{
		{"none", corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}, Volumes: []corev1.Volume{emptyDir("", nil)}}, false},
		{"requests only", corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: storage}}}}, false},
		{"memory emptyDir with a size limit", corev1.PodSpec{Volumes: []corev1.Volume{emptyDir(corev1.StorageMediumMemory, &mi)}}, false},
		{"emptyDir with a zero size limit", corev1.PodSpec{Volumes: []corev1.Volume{emptyDir("", &zero)}}, false},
		{"emptyDir with a size limit", corev1.PodSpec{Volumes: []corev1.Volume{emptyDir("", &mi)}}, true},
		{"container limit", corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}, {Name: "b", Resources: corev1.ResourceRequirements{Limits: storage}}}}, true},
		{"init container limit", corev1.PodSpec{InitContainers: []corev1.Container{{Name: "i", Resources: corev1.ResourceRequirements{Limits: storage}}}}, true},
		{"pod-level limit", corev1.PodSpec{Resources: &corev1.ResourceRequirements{Limits: storage}}, true},
	}
	for _, c := range cases {
		if got := storageLimited(&corev1.Pod{Spec: c.spec}); got != c.want {
			t.Errorf("%s: storageLimited %v, want %v", c.name, got, c.want)
		}
	}
}
