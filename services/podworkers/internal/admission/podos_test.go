package admission

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodOS(t *testing.T) {
	h := podOS("linux")
	for _, c := range []struct {
		name   string
		pod    *corev1.Pod
		reason string
	}{
		{"no OS", &corev1.Pod{}, ""},
		{"linux field", &corev1.Pod{Spec: corev1.PodSpec{OS: &corev1.PodOS{Name: corev1.Linux}}}, ""},
		{"linux label", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{corev1.LabelOSStable: "linux"}}}, ""},
		{"windows field", &corev1.Pod{Spec: corev1.PodSpec{OS: &corev1.PodOS{Name: corev1.Windows}}}, ReasonPodOSNotSupported},
		{"windows label", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{corev1.LabelOSStable: "windows"}}}, ReasonPodOSSelectorNodeLabelDoesNotMatch},
	} {
		r := h.Admit(&Attributes{Pod: c.pod})
		if r.Admit != (c.reason == "") || r.Reason != c.reason {
			t.Errorf("%s: %+v, want reason %q", c.name, r, c.reason)
		}
	}
}
