package workers

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DecodePod decodes a pod with a probe (in a container, or in a sidecar
// init container) whole, and of a pod without one its metadata alone,
// which the manager tells apart as hasProbes does; bytes that are no pod
// are reported.
func TestDecodePod(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	base := func(mut func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u", Name: "p", Namespace: "ns"},
			Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: "i", Image: "busybox"}},
				Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		mut(p)
		return p
	}
	for name, tc := range map[string]struct {
		pod   *corev1.Pod
		whole bool
	}{
		"no probe":  {base(func(*corev1.Pod) {}), false},
		"readiness": {base(func(p *corev1.Pod) { p.Spec.Containers[0].ReadinessProbe = probe }), true},
		"liveness":  {base(func(p *corev1.Pod) { p.Spec.Containers[0].LivenessProbe = probe }), true},
		"startup of a sidecar": {base(func(p *corev1.Pod) {
			p.Spec.InitContainers[0].RestartPolicy, p.Spec.InitContainers[0].StartupProbe = &always, probe
		}), true},
		"ephemeral, never probed": {base(func(p *corev1.Pod) { p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{}} }), false},
	} {
		raw, err := tc.pod.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		var got corev1.Pod
		if err := DecodePod(raw, &got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		switch {
		case tc.whole && !reflect.DeepEqual(&got, tc.pod):
			t.Errorf("%s: decoded %+v, want the whole pod", name, got)
		case !tc.whole && (!reflect.DeepEqual(got.ObjectMeta, tc.pod.ObjectMeta) || !reflect.DeepEqual(got.Spec, corev1.PodSpec{})):
			t.Errorf("%s: decoded %+v, want its metadata alone", name, got)
		}
		if hasProbes(&got) != tc.whole {
			t.Errorf("%s: hasProbes of the decoded pod is %v", name, !tc.whole)
		}
	}
	if err := DecodePod([]byte{0x12, 0x05, 0x01}, &corev1.Pod{}); err == nil {
		t.Error("bytes that are no pod were decoded")
	}
}

// BenchmarkDecodePod decodes a running pod without probes, as the API
// server holds one (a service account token volume, the default
// tolerations, its status): whole, then as the prober does.
func BenchmarkDecodePod(b *testing.B) {
	seconds := int64(300)
	now := metav1.Now()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{UID: "6a2b4f1e-9a51-4c1d-8e0b-0b9d3c7e1f2a", Name: "web-7d9c5b8f6-x2x9q", Namespace: "default",
			Labels:      map[string]string{"app": "web", "pod-template-hash": "7d9c5b8f6"},
			Annotations: map[string]string{"kubernetes.io/config.source": "api"}, ResourceVersion: "123456", CreationTimestamp: now},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "web", Image: "registry.local/web:1.0", Command: []string{"/web", "--port=8080"},
				Ports:                  []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
				VolumeMounts:           []corev1.VolumeMount{{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
				TerminationMessagePath: "/dev/termination-log", ImagePullPolicy: corev1.PullIfNotPresent}},
			Volumes: []corev1.Volume{{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &seconds}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
						Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}}}}}}},
			Tolerations: []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &seconds},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &seconds}},
			NodeName: "node-1", ServiceAccountName: "default", SchedulerName: "default-scheduler"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7", HostIP: "192.168.0.2", StartTime: &now,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "web", Ready: true, Image: "registry.local/web:1.0", ImageID: "sha256:0123",
				ContainerID: "containerd://abcdef", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}},
	}
	raw, err := p.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	for name, dec := range map[string]func([]byte, *corev1.Pod) error{
		"whole":  func(raw []byte, p *corev1.Pod) error { return p.Unmarshal(raw) },
		"prober": DecodePod,
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var got corev1.Pod
				if err := dec(raw, &got); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
