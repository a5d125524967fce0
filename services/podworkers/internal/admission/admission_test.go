package admission

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/kube"
)

func podReq(name, cpu, mem string) *corev1.Pod {
	req := corev1.ResourceList{}
	if cpu != "" {
		req[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		req[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: "u-" + "name"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: req}}}}}
}

func TestResourceFit(t *testing.T) {
	alloc, err := kube.ParseResourceList("cpu=1, memory=1Gi, pods=2")
	if err != nil {
		t.Fatal(err)
	}
	chain := Chain{Validate(), ResourceFit(func() corev1.ResourceList { return alloc })}
	cases := []struct {
		name   string
		pod    *corev1.Pod
		others []*corev1.Pod
		reason string
		msg    string
	}{
		{"fits", podReq("a", "500m", "100Mi"), nil, "", ""},
		{"cpu", podReq("a", "2", ""), nil, ReasonOutOfCPU, "Node didn't have enough resource: cpu, requested: 2000, used: 0, capacity: 1000"},
		{"cpu with others", podReq("a", "600m", ""), []*corev1.Pod{podReq("b", "500m", "")}, ReasonOutOfCPU, "requested: 600, used: 500"},
		{"memory", podReq("a", "", "2Gi"), nil, ReasonOutOfMemory, "memory"},
		{"pods", podReq("a", "", ""), []*corev1.Pod{podReq("b", "", ""), podReq("c", "", "")}, ReasonOutOfPods, "pods, requested: 1, used: 2, capacity: 2"},
		{"no containers", &corev1.Pod{}, nil, ReasonInvalidPod, "no containers"},
		{"negative", podReq("a", "-1", ""), nil, ReasonInvalidPod, "negative"},
	}
	for _, c := range cases {
		r := chain.Admit(&Attributes{Pod: c.pod, OtherPods: c.others})
		if c.reason == "" {
			if !r.Admit {
				t.Errorf("%s: rejected: %+v", c.name, r)
			}
			continue
		}
		if r.Admit || r.Reason != c.reason || !strings.Contains(r.Message, c.msg) {
			t.Errorf("%s: got %+v, want %s containing %q", c.name, r, c.reason, c.msg)
		}
	}
	g := int64(10 * MaxGracePeriodSeconds)
	p := podReq("a", "", "")
	p.Spec.TerminationGracePeriodSeconds = &g
	if r := chain.Admit(&Attributes{Pod: p}); r.Admit || r.Reason != ReasonInvalidPod {
		t.Errorf("absurd grace admitted: %+v", r)
	}
	if _, err := kube.ParseResourceList("cpu"); err == nil {
		t.Error("bad list parsed")
	}
}
