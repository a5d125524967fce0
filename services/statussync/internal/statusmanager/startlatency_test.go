package statusmanager

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func histogram(t *testing.T, h prometheus.Histogram) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

func TestStartLatency(t *testing.T) {
	s, err := newStartLatency(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	seen := created.Add(time.Second)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1", CreationTimestamp: metav1.NewTime(created)}}
	p.Status.Phase = corev1.PodPending
	s.observe(p, p.UID, time.Time{}, created.Add(time.Second))

	// Running, the container not yet: the agent's start duration only.
	p.Status.Phase = corev1.PodRunning
	p.Status.StartTime = &metav1.Time{Time: created.Add(2 * time.Second)}
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		StartedAt: metav1.NewTime(created.Add(2 * time.Second)), FinishedAt: metav1.NewTime(created.Add(5 * time.Second))}}}}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{}}}}
	s.observe(p, p.UID, seen, created.Add(6*time.Second))
	if n, sum := histogram(t, s.duration); n != 1 || sum != 5 {
		t.Errorf("pod_start_duration: %d samples, sum %v; want 1, 5 s (seen at +1 s, Running at +6 s)", n, sum)
	}
	if n, _ := histogram(t, s.total); n != 0 {
		t.Errorf("pod_start_total_duration observed before every container ran")
	}

	// Every container running at +8 s: total 8 s, SLI 8 s less 3 s of init.
	p.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(created.Add(7 * time.Second))}}
	s.observe(p, p.UID, seen, created.Add(8*time.Second))
	s.observe(p, p.UID, seen, created.Add(9*time.Second)) // a later event: not counted again
	if n, sum := histogram(t, s.total); n != 1 || sum != 8 {
		t.Errorf("pod_start_total_duration: %d samples, sum %v; want 1, 8 s", n, sum)
	}
	if n, sum := histogram(t, s.sli); n != 1 || sum != 5 {
		t.Errorf("pod_start_sli_duration: %d samples, sum %v; want 1, 5 s", n, sum)
	}
	if n, _ := histogram(t, s.duration); n != 1 {
		t.Errorf("pod_start_duration counted %d times", n)
	}

	// A pod first seen already started (statussync restarted) is not
	// followed; a stateful pod counts in the total, not in the SLI.
	s.observe(p.DeepCopy(), "u2", seen, created.Add(10*time.Second))
	q := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u3", CreationTimestamp: metav1.NewTime(created)},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data"}}}}}}
	s.observe(q, q.UID, seen, created)
	q.Status.Phase = corev1.PodRunning
	q.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(created.Add(time.Second))}}}}
	s.observe(q, q.UID, seen, created.Add(2*time.Second))
	if n, _ := histogram(t, s.total); n != 2 {
		t.Errorf("pod_start_total_duration: %d samples, want 2 (u1, u3)", n)
	}
	if n, _ := histogram(t, s.sli); n != 1 {
		t.Errorf("pod_start_sli_duration: %d samples, want 1 (the stateful pod left out)", n)
	}
	s.forget("u1")
	s.forget("u3")
	if len(s.tracked) != 0 {
		t.Errorf("tracked after forget: %v", s.tracked)
	}
}
