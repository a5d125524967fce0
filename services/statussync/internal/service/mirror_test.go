package service

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
)

// startsObserved is how many pod starts the stage measured
// (kubelet_pod_start_total_duration_seconds).
func startsObserved(t *testing.T, reg *prometheus.Registry) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "kubelet_pod_start_total_duration_seconds" {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

// forgedMirror is a pod bound to the node whose author set the mirror
// annotation to another pod's UID.
func (h *harness) forgedMirror(name string, victim string) *corev1.Pod {
	h.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns, Annotations: map[string]string{"kubernetes.io/config.mirror": victim}},
		Spec:       corev1.PodSpec{NodeName: h.node, Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
	}
	created, err := h.cs.CoreV1().Pods(h.ns).Create(h.ctx, p, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return created
}

// noAgentStatus: nothing of a pod's status says an agent wrote it.
func noAgentStatus(p *corev1.Pod) error {
	if len(p.Status.ContainerStatuses) > 0 || p.Status.StartTime != nil || p.Status.PodIP != "" || len(p.Status.Conditions) > 0 {
		return fmt.Errorf("status written: %+v", p.Status)
	}
	return nil
}

// TestForgedMirrorAnnotation: a pod whose author set
// kubernetes.io/config.mirror to another pod's UID is not taken for that
// pod's mirror (kubelet: a mirror pod pairs with the static pod of its own
// full name). statussync neither writes the victim's status onto it nor
// lets it disturb the victim's: a forged pod created and deleted while the
// victim starts used to make statussync forget the victim's start, which
// then went unmeasured. A static pod and its real mirror pod still pair.
func TestForgedMirrorAnnotation(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, harnessOptions{registry: reg})
	victim := h.createPod("victim", nil)
	forged := h.forgedMirror("forged", string(victim.UID))
	// the last forged pod the informer sees before the victim starts is
	// deleted: its deletion must not touch the victim's start.
	gone := h.forgedMirror("forged-gone", string(victim.UID))
	zero := int64(0)
	if err := h.cs.CoreV1().Pods(h.ns).Delete(h.ctx, gone.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	h.publishStatus(runtimeStatus(victim, runningC("app", "sim://v1", 0)))
	h.waitPod(victim.Name, "victim running", func(p *corev1.Pod) error { return wantPhase(p, corev1.PodRunning) })
	h.eventually("the victim's start measured", func() error {
		if n := startsObserved(t, reg); n != 1 {
			return fmt.Errorf("%d starts measured", n)
		}
		return nil
	})
	if p, err := h.cs.CoreV1().Pods(h.ns).Get(h.ctx, forged.Name, metav1.GetOptions{}); err != nil || noAgentStatus(p) != nil {
		t.Errorf("the forged pod: %v %v", err, noAgentStatus(p))
	}

	// A static pod: its mirror pod gets its status, a forged pod of
	// another name with the same annotation gets none.
	hash := "static" + randomSuffix()
	static := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "static-web-" + h.node, Namespace: h.ns, UID: typesUID(hash),
			Annotations: map[string]string{"kubernetes.io/config.source": "file", "kubernetes.io/config.hash": hash}},
		Spec: corev1.PodSpec{NodeName: h.node, RestartPolicy: corev1.RestartPolicyAlways, Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
	}
	h.publishPods(bus.OpAdd, "file", static)
	forgedStatic := h.forgedMirror("forged-static", hash)
	mirror := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: static.Name, Namespace: h.ns, Annotations: map[string]string{
			"kubernetes.io/config.mirror": hash, "kubernetes.io/config.source": "file", "kubernetes.io/config.hash": hash}},
		Spec: static.Spec,
	}
	if _, err := h.cs.CoreV1().Pods(h.ns).Create(h.ctx, mirror, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.publishStatus(runtimeStatus(static, runningC("web", "sim://s1", 0)))
	h.waitPod(mirror.Name, "mirror running", func(p *corev1.Pod) error { return wantPhase(p, corev1.PodRunning) })
	if p, err := h.cs.CoreV1().Pods(h.ns).Get(h.ctx, forgedStatic.Name, metav1.GetOptions{}); err != nil || noAgentStatus(p) != nil {
		t.Errorf("the forged pod of the static pod: %v %v", err, noAgentStatus(p))
	}
}
