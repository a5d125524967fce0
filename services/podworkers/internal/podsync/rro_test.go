package podsync

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/splitlet/splitlet/services/podworkers/internal/fakeruntime"
)

// rroRuntime is a runtime whose every handler supports recursive read-only
// mounts.
type rroRuntime struct{ *fakeruntime.Runtime }

func (rroRuntime) RecursiveReadOnlyMounts(func() (string, error)) bool { return true }

// A container's status lists its mounts as the kubelet's does: a read-only
// one with its recursive read-only mode resolved for the runtime (Enabled
// where the runtime has it and the mount asks for it or for IfPossible,
// Disabled otherwise), a writable one with none.
func TestVolumeMountStatuses(t *testing.T) {
	mode := func(m corev1.RecursiveReadOnlyMode) *corev1.RecursiveReadOnlyMode { return &m }
	c := &corev1.Container{Name: "c", VolumeMounts: []corev1.VolumeMount{
		{Name: "mnt", MountPath: "/rro", ReadOnly: true, RecursiveReadOnly: mode(corev1.RecursiveReadOnlyEnabled)},
		{Name: "mnt", MountPath: "/if-possible", ReadOnly: true, RecursiveReadOnly: mode(corev1.RecursiveReadOnlyIfPossible)},
		{Name: "mnt", MountPath: "/ro", ReadOnly: true},
		{Name: "mnt", MountPath: "/rw"},
	}}
	p := pod("u", corev1.RestartPolicyNever)
	p.Spec.Containers = []corev1.Container{*c}
	ro := func(m corev1.RecursiveReadOnlyMode) corev1.VolumeMountStatus {
		return corev1.VolumeMountStatus{Name: "mnt", ReadOnly: true, RecursiveReadOnly: mode(m)}
	}
	at := func(path string, st corev1.VolumeMountStatus) corev1.VolumeMountStatus {
		st.MountPath = path
		return st
	}
	rw := corev1.VolumeMountStatus{Name: "mnt", MountPath: "/rw"}
	for _, tc := range []struct {
		name string
		s    *Syncer
		want []corev1.VolumeMountStatus
	}{
		{"without recursive read-only mounts", New(fakeruntime.New(), &sink{}), []corev1.VolumeMountStatus{
			at("/rro", ro(corev1.RecursiveReadOnlyDisabled)), at("/if-possible", ro(corev1.RecursiveReadOnlyDisabled)),
			at("/ro", ro(corev1.RecursiveReadOnlyDisabled)), rw}},
		{"with them", New(rroRuntime{fakeruntime.New()}, &sink{}), []corev1.VolumeMountStatus{
			at("/rro", ro(corev1.RecursiveReadOnlyEnabled)), at("/if-possible", ro(corev1.RecursiveReadOnlyEnabled)),
			at("/ro", ro(corev1.RecursiveReadOnlyDisabled)), rw}},
	} {
		if got := tc.s.volumeMountStatuses(p, c); !equality.Semantic.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
