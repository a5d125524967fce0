package admission

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/kube"
)

func TestNodePredicates(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"disk": "ssd"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: "gone", Effect: corev1.TaintEffectNoExecute},
			{Key: "busy", Effect: corev1.TaintEffectNoSchedule}, // the kubelet leaves NoSchedule to the scheduler
		}}}
	tolerant := []corev1.Toleration{{Key: "gone", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}
	pod := func(uid string, mod func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "ns", UID: types.UID(uid)},
			Spec: corev1.PodSpec{NodeName: "n1", Tolerations: tolerant, Containers: []corev1.Container{{Name: "c"}}}}
		if mod != nil {
			mod(p)
		}
		return p
	}
	port := func(ip string, n int32) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{HostIP: ip, HostPort: n, ContainerPort: n}}
		}
	}
	holder := pod("holder", port("", 8080))
	udp := pod("udp", func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{HostPort: 9090, ContainerPort: 9090, Protocol: corev1.ProtocolUDP}}
	})
	local := pod("local", port("127.0.0.1", 7070))
	done := pod("done", port("", 6060))
	done.Status.Phase = corev1.PodSucceeded
	h := NodePredicates(func() *corev1.Node { return node })
	for _, c := range []struct {
		name   string
		pod    *corev1.Pod
		reason string
	}{
		{"fits", pod("a", nil), ""},
		{"node selector matches", pod("a", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"disk": "ssd"} }), ""},
		{"node selector", pod("a", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"disk": "hdd"} }), ReasonNodeAffinity},
		{"required affinity", pod("a", func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"nvme"}}}}}}}}
		}), ReasonNodeAffinity},
		{"other node", pod("a", func(p *corev1.Pod) { p.Spec.NodeName = "n2" }), ReasonNodeName},
		{"port taken", pod("a", port("", 8080)), ReasonNodePorts},
		{"port taken on one address", pod("a", port("10.0.0.1", 8080)), ReasonNodePorts},
		{"all addresses against one", pod("a", port("", 7070)), ReasonNodePorts},
		{"another address", pod("a", port("10.0.0.1", 7070)), ""},
		{"other protocol", pod("a", port("", 9090)), ""},
		{"port of a finished pod", pod("a", port("", 6060)), ""},
		{"untolerated NoExecute", pod("a", func(p *corev1.Pod) { p.Spec.Tolerations = nil }), ReasonTaintToleration},
		{"static pod", pod("a", func(p *corev1.Pod) {
			p.Spec.Tolerations = nil
			p.Annotations = map[string]string{kube.AnnotationConfigSource: "file"}
		}), ""},
		// the first failure wins, in the kubelet's order.
		{"affinity before ports", pod("a", func(p *corev1.Pod) {
			port("", 8080)(p)
			p.Spec.NodeSelector = map[string]string{"disk": "hdd"}
		}), ReasonNodeAffinity},
	} {
		r := h.Admit(&Attributes{Pod: c.pod, OtherPods: []*corev1.Pod{holder, udp, done}, Local: func() []*corev1.Pod { return []*corev1.Pod{local} }})
		switch {
		case c.reason == "" && !r.Admit:
			t.Errorf("%s: rejected %+v", c.name, r)
		case c.reason != "" && (r.Admit || r.Reason != c.reason || r.Message != "Predicate "+c.reason+" failed: "+map[string]string{
			ReasonNodeAffinity: descNodeAffinity, ReasonNodeName: descNodeName, ReasonNodePorts: descNodePorts, ReasonTaintToleration: descTaint}[c.reason]):
			t.Errorf("%s: %+v, want %s", c.name, r, c.reason)
		}
	}
	if r := NodePredicates(func() *corev1.Node { return nil }).Admit(&Attributes{Pod: pod("a", port("", 8080)), OtherPods: []*corev1.Pod{holder}}); !r.Admit {
		t.Errorf("no node known: %+v, want admitted", r)
	}
}
