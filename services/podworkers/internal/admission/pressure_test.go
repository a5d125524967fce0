package admission

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestPressureAdmission(t *testing.T) {
	bestEffort := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	burstable := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("10Mi")}}}}}}
	tolerating := bestEffort.DeepCopy()
	tolerating.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	critical := bestEffort.DeepCopy()
	prio := int32(2000001000)
	critical.Spec.Priority = &prio
	mem := []corev1.NodeConditionType{corev1.NodeMemoryPressure}
	disk := []corev1.NodeConditionType{corev1.NodeDiskPressure}
	for _, c := range []struct {
		name  string
		pod   *corev1.Pod
		conds []corev1.NodeConditionType
		admit bool
	}{
		{"no pressure", bestEffort, nil, true},
		{"memory: best effort refused", bestEffort, mem, false},
		{"memory: burstable admitted", burstable, mem, true},
		{"memory: tolerating best effort admitted", tolerating, mem, true},
		{"disk: burstable refused", burstable, disk, false},
		{"disk: critical admitted", critical, disk, true},
	} {
		r := Pressure(func() []corev1.NodeConditionType { return c.conds }).Admit(&Attributes{Pod: c.pod})
		if started := Pressure(func() []corev1.NodeConditionType { return c.conds }).Admit(&Attributes{Pod: c.pod, Started: true}); !started.Admit {
			t.Errorf("%s: a pod the node already started refused again: %q %q", c.name, started.Reason, started.Message)
		}
		if r.Admit != c.admit {
			t.Errorf("%s: admit %v, want %v", c.name, r.Admit, c.admit)
		}
		if !r.Admit && (r.Reason != "Evicted" || r.Message != "The node had condition: ["+string(c.conds[0])+"]. ") {
			t.Errorf("%s: %q %q", c.name, r.Reason, r.Message)
		}
	}
}
