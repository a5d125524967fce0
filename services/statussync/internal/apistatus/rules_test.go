package apistatus

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// TestEqualByAgent: statuses differing only in what statussync does not own
// (foreign conditions, resource claim statuses) are equal; a change to an
// owned condition or any other field is not; neither argument is changed.
func TestEqualByAgent(t *testing.T) {
	base := corev1.PodStatus{
		Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
			{Type: "example.com/gate", Status: corev1.ConditionFalse},
		},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true, RestartCount: 1}},
	}
	for _, tc := range []struct {
		name  string
		edit  func(*corev1.PodStatus)
		equal bool
	}{
		{"identical", func(*corev1.PodStatus) {}, true},
		{"foreign condition differs", func(s *corev1.PodStatus) { s.Conditions[1].Status = corev1.ConditionTrue }, true},
		{"resource claim statuses differ", func(s *corev1.PodStatus) {
			s.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "claim"}}
		}, true},
		{"owned condition differs", func(s *corev1.PodStatus) { s.Conditions[0].Status = corev1.ConditionFalse }, false},
		{"owned condition missing", func(s *corev1.PodStatus) { s.Conditions = s.Conditions[1:] }, false},
		{"container status differs", func(s *corev1.PodStatus) { s.ContainerStatuses[0].RestartCount = 2 }, false},
		{"phase differs", func(s *corev1.PodStatus) { s.Phase = corev1.PodSucceeded }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := base.DeepCopy(), base.DeepCopy()
			tc.edit(b)
			a0, b0 := a.DeepCopy(), b.DeepCopy()
			if got := EqualByAgent(a, b); got != tc.equal {
				t.Errorf("EqualByAgent = %v, want %v", got, tc.equal)
			}
			if !equality.Semantic.DeepEqual(a, a0) || !equality.Semantic.DeepEqual(b, b0) {
				t.Error("EqualByAgent changed an argument")
			}
		})
	}
}
