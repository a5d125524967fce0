package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func qosPod(containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{Spec: corev1.PodSpec{Containers: containers}}
}

func res(cpu, mem string) corev1.ResourceList {
	l := corev1.ResourceList{}
	if cpu != "" {
		l[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		l[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	return l
}

func TestQOSClass(t *testing.T) {
	p := qosPod(corev1.Container{Name: "a"})
	if q := QOSClass(p); q != corev1.PodQOSBestEffort {
		t.Fatalf("%s", q)
	}
	rl := res("100m", "64Mi")
	p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: rl, Limits: rl}
	if q := QOSClass(p); q != corev1.PodQOSGuaranteed {
		t.Fatalf("%s", q)
	}
	p.Spec.Containers[0].Resources.Limits = nil
	if q := QOSClass(p); q != corev1.PodQOSBurstable {
		t.Fatalf("%s", q)
	}
}

func TestOOMScoreAdj(t *testing.T) {
	const capacity = 10 << 30 // 10 GiB
	always := corev1.ContainerRestartPolicyAlways
	guaranteed := qosPod(corev1.Container{Name: "a", Resources: corev1.ResourceRequirements{Requests: res("1", "1Gi"), Limits: res("1", "1Gi")}})
	bestEffort := qosPod(corev1.Container{Name: "a"})
	burstable := qosPod(
		corev1.Container{Name: "tenth", Resources: corev1.ResourceRequirements{Requests: res("", "1Gi")}},
		corev1.Container{Name: "none", Resources: corev1.ResourceRequirements{Requests: res("100m", "")}},
		corev1.Container{Name: "all", Resources: corev1.ResourceRequirements{Requests: res("", "10Gi")}},
	)
	burstable.Spec.InitContainers = []corev1.Container{{Name: "sidecar", RestartPolicy: &always, Resources: corev1.ResourceRequirements{Requests: res("", "512Mi")}}}
	critical := bestEffort.DeepCopy()
	prio := int32(2000001000)
	critical.Spec.Priority = &prio
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		ctr  *corev1.Container
		want int64
	}{
		{"guaranteed", guaranteed, &guaranteed.Spec.Containers[0], -997},
		{"best effort", bestEffort, &bestEffort.Spec.Containers[0], 1000},
		{"node critical", critical, &critical.Spec.Containers[0], -997},
		{"burstable, a tenth of the node", burstable, &burstable.Spec.Containers[0], 900},
		{"burstable, no memory request", burstable, &burstable.Spec.Containers[1], 999},
		{"burstable, the whole node", burstable, &burstable.Spec.Containers[2], 3},
		// the regular container requesting least asks for none: 1000, so
		// the sidecar keeps its own 950.
		{"sidecar", burstable, &burstable.Spec.InitContainers[0], 950},
	} {
		if got := OOMScoreAdj(c.pod, c.ctr, capacity); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	// a sidecar asking for less than every regular container is held to
	// the one that asks least.
	p := qosPod(corev1.Container{Name: "app", Resources: corev1.ResourceRequirements{Requests: res("", "2Gi")}})
	p.Spec.InitContainers = []corev1.Container{{Name: "sc", RestartPolicy: &always, Resources: corev1.ResourceRequirements{Requests: res("", "1Gi")}}}
	if got := OOMScoreAdj(p, &p.Spec.InitContainers[0], capacity); got != 800 {
		t.Errorf("small sidecar: %d, want the app's 800", got)
	}
}
