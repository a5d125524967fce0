package bus

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func testPods(n int) []corev1.Pod {
	pods := make([]corev1.Pod, n)
	for i := range pods {
		pods[i].ObjectMeta = metav1.ObjectMeta{Name: fmt.Sprint("p", i), Namespace: "default", UID: types.UID(fmt.Sprint("u", i))}
	}
	return pods
}

func TestSnapshotsAssemble(t *testing.T) {
	pods := testPods(7)
	parts := SetParts(pods, 3, "s1")
	if len(parts) != 3 || len(parts[0].Pods)+len(parts[1].Pods)+len(parts[2].Pods) != 7 {
		t.Fatalf("parts %v", parts)
	}
	env := func(op Op, source string) *Envelope { return &Envelope{Op: op, Source: source} }
	s := NewSnapshots()
	// another source's part between them changes nothing of this one.
	other := SetParts(testPods(2), 2, "o")
	for i, p := range parts {
		if _, _, apply := s.Resolve("sub", env(OpSetPart, "api"), &p); apply != (i == 2) {
			t.Fatalf("part %d: apply %v", i+1, apply)
		}
		if i == 0 {
			if _, _, apply := s.Resolve("sub", env(OpSetPart, "file"), &other[0]); apply {
				t.Fatal("one part of two applied")
			}
		}
	}
	// a whole snapshot, then one that starts in its middle.
	s = NewSnapshots()
	var op Op
	var got []corev1.Pod
	for _, p := range parts {
		op, got, _ = s.Resolve("sub", env(OpSetPart, "api"), &p)
	}
	if op != OpSet || len(got) != 7 || got[0].UID != "u0" || got[6].UID != "u6" {
		t.Fatalf("assembled %s %d pods", op, len(got))
	}
	for _, p := range parts[1:] {
		if _, _, apply := s.Resolve("sub", env(OpSetPart, "api"), &p); apply {
			t.Fatal("a snapshot without its first part applied")
		}
	}
	// parts of two snapshots interleaved: the first is dropped, the second applies.
	newer := SetParts(pods, 2, "s2")
	s.Resolve("sub", env(OpSetPart, "api"), &parts[0])
	s.Resolve("sub", env(OpSetPart, "api"), &newer[0])
	if _, _, apply := s.Resolve("sub", env(OpSetPart, "api"), &parts[1]); apply {
		t.Fatal("a part of an abandoned snapshot applied")
	}
	if _, _, apply := s.Resolve("sub", env(OpSetPart, "api"), &newer[1]); apply {
		t.Fatal("a snapshot that lost its order applied")
	}
	// other operations pass through.
	add := PodUpdate{Pods: pods[:1]}
	if op, got, apply := s.Resolve("sub", env(OpAdd, "api"), &add); op != OpAdd || len(got) != 1 || !apply {
		t.Fatalf("ADD resolved to %s %d %v", op, len(got), apply)
	}
}
