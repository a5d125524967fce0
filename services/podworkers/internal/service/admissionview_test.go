package service

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/services/podworkers/internal/admission"
)

// The replicas cache only what admission and the partition index read: the
// same requests, the host ports, the phase, the mirror annotation; nothing
// of the rest (environment, commands, statuses, labels).
func TestAdmissionView(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	req := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", Labels: map[string]string{"a": "b"},
			Annotations: map[string]string{mirrorAnnotation: "hash", "other": "x"}},
		Spec: corev1.PodSpec{NodeName: "n",
			InitContainers: []corev1.Container{{Name: "side", RestartPolicy: &always, Resources: corev1.ResourceRequirements{Requests: req}}},
			Containers: []corev1.Container{{Name: "app", Command: []string{"sleep"}, Env: []corev1.EnvVar{{Name: "K", Value: "v"}},
				Resources: corev1.ResourceRequirements{Requests: req},
				Ports:     []corev1.ContainerPort{{ContainerPort: 80}, {ContainerPort: 81, HostPort: 8081}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app"}}},
	}
	obj, err := admissionView(p)
	if err != nil {
		t.Fatal(err)
	}
	v := obj.(*corev1.Pod)
	want, got := admission.Requests(p), admission.Requests(v)
	for n, q := range want {
		if g := got[n]; g.Cmp(q) != 0 {
			t.Errorf("requests of %s: %v, want %v", n, g.String(), q.String())
		}
	}
	if len(v.Spec.Containers[0].Ports) != 1 || v.Spec.Containers[0].Ports[0].HostPort != 8081 {
		t.Errorf("ports %+v, want the host port alone", v.Spec.Containers[0].Ports)
	}
	if v.Status.Phase != corev1.PodRunning || v.Annotations[mirrorAnnotation] != "hash" || v.UID != "u" {
		t.Errorf("kept %+v", v.ObjectMeta)
	}
	if v.Labels != nil || v.Annotations["other"] != "" || v.Spec.Containers[0].Env != nil || v.Spec.Containers[0].Command != nil ||
		v.Status.PodIP != "" || v.Status.ContainerStatuses != nil {
		t.Errorf("the view keeps more than admission reads: %+v", v)
	}
}
