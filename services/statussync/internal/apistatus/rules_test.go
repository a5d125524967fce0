package apistatus

import (
	"encoding/json"
	"math/rand/v2"
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

// EqualByAgent answers as the reflective comparison alone would, for
// normalised statuses, related and unrelated, exact copies, and copies
// whose empty lists are nil: the encoding's shortcut only ever says equal
// where the statuses are.
func TestEqualByAgentMatchesReflective(t *testing.T) {
	g := statusGen{randChooser{rand.New(rand.NewPCG(3, 4))}}
	n := 20000
	if testing.Short() {
		n = 2000
	}
	byEncoding, equal := 0, 0
	pod := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: "i"}}, Containers: []corev1.Container{{Name: "a"}, {Name: "b"}}}}
	check := func(a, b corev1.PodStatus) {
		t.Helper()
		Normalize(pod, &a)
		Normalize(pod, &b)
		ok := ownedConditionsAgree(&a, &b)
		ac := agentView(&a, &b)
		want := ok && equality.Semantic.DeepEqual(&ac, &b)
		if got := EqualByAgent(&a, &b); got != want {
			x, _ := json.Marshal(a)
			y, _ := json.Marshal(b)
			t.Fatalf("EqualByAgent %v, reflective %v\na %s\nb %s", got, want, x, y)
		}
		if want {
			equal++
		}
		if ok && sameEncoding(&ac, &b) {
			byEncoding++
		}
	}
	for i := range n {
		_, a, b := g.pair()
		switch i % 3 {
		case 0:
			check(a, b)
		case 1:
			check(a, *a.DeepCopy())
		default:
			c := *a.DeepCopy()
			if len(c.ContainerStatuses) == 0 {
				c.ContainerStatuses = []corev1.ContainerStatus{}
			}
			if len(c.PodIPs) == 0 {
				c.PodIPs = nil
			}
			check(a, c)
		}
	}
	t.Logf("%d of %d pairs equal, %d told by their encoding", equal, n, byEncoding)
	if byEncoding < n/2 || equal == n {
		t.Fatalf("%d pairs told by their encoding, %d equal, of %d: the test does not exercise both paths", byEncoding, equal, n)
	}
}

// BenchmarkEqualByAgent: a running pod's status against an equal copy
// (told by the encoding) and against one that differs (compared in full).
func BenchmarkEqualByAgent(b *testing.B) {
	_, running, succeeded := benchStatuses()
	same := *running.DeepCopy()
	for _, c := range []struct {
		name string
		b    *corev1.PodStatus
	}{{"equal", &same}, {"different", &succeeded}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				EqualByAgent(&running, c.b)
			}
		})
	}
}
