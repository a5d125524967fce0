package service

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A pod from the bus keeps the phase, start time and QoS class of its API
// status, and nothing else of it; its spec and metadata are untouched.
func TestBusPodViewKeepsWhatPodworkersReads(t *testing.T) {
	start := metav1.Now()
	pods := []corev1.Pod{{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"k": "v"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &start, QOSClass: corev1.PodQOSBurstable,
			PodIP: "10.0.0.1", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true}}},
	}}
	busPodView(pods)
	st := pods[0].Status
	if st.Phase != corev1.PodRunning || st.StartTime == nil || !st.StartTime.Equal(&start) || st.QOSClass != corev1.PodQOSBurstable {
		t.Errorf("lost what podworkers reads: %+v", st)
	}
	if st.PodIP != "" || st.Conditions != nil || st.ContainerStatuses != nil {
		t.Errorf("kept what podworkers does not read: %+v", st)
	}
	if pods[0].Labels["k"] != "v" || len(pods[0].Spec.Containers) != 1 {
		t.Errorf("spec or metadata changed: %+v", pods[0])
	}
}
