package statusmanager

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/health"
)

// podStartBuckets are the kubelet's buckets of its pod start histograms.
var podStartBuckets = []float64{0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600}

// startLatency measures pod starts under the kubelet's metric names, from
// the pods as the API server's watch shows them (statussync writes the
// statuses, so its informer sees them land):
//
//   - kubelet_pod_start_duration_seconds: from the node agent first seeing
//     the pod (podconfig's kubernetes.io/config.seen annotation on the bus)
//     to its phase first being Running;
//   - kubelet_pod_start_total_duration_seconds: from the pod's creation to
//     every container running, as the watch shows it;
//   - kubelet_pod_start_sli_duration_seconds: the same less the time its
//     init containers ran, for stateless pods only (kubelet: the pod
//     startup latency SLI). Image pulls are not subtracted: the pod workers
//     do not report them on the bus (local images on CRI pull in no time).
//
// Like the kubelet's tracker it follows only pods it first sees not yet
// started: a restarted statussync leaves out the starts under way and
// never counts a pod twice. Its fields are guarded by Manager.mu.
type startLatency struct {
	duration, total, sli prometheus.Histogram
	// tracked holds the pods first seen not started, and which figures
	// were recorded for each.
	tracked map[types.UID]*startState
}

type startState struct {
	runningSeen, startedSeen bool
}

func newStartLatency(reg prometheus.Registerer) (*startLatency, error) {
	h := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Subsystem: "kubelet", Name: name, Help: help, Buckets: podStartBuckets})
	}
	s := &startLatency{
		duration: h("pod_start_duration_seconds", "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run"),
		total: h("pod_start_total_duration_seconds", "Duration in seconds to start a pod since creation, including time to pull images and run init containers, "+
			"measured from pod creation timestamp to when all its containers are reported as started and observed via watch"),
		sli: h("pod_start_sli_duration_seconds", "Duration in seconds to start a pod, excluding time to pull images and run init containers, "+
			"measured from pod creation timestamp to when all its containers are reported as started and observed via watch"),
		tracked: map[types.UID]*startState{},
	}
	if reg == nil {
		return s, nil
	}
	for _, c := range []*prometheus.Histogram{&s.duration, &s.total, &s.sli} {
		var err error
		if *c, err = health.Register(reg, *c); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// observe takes the API object of a pod as the watch shows it; seen is when
// the node agent first saw it (zero when unknown). Call with Manager.mu held.
func (s *startLatency) observe(p *corev1.Pod, uid types.UID, seen, now time.Time) {
	st := s.tracked[uid]
	if st == nil {
		// kubelet: a pod is followed only from before its start, and not
		// when it is unschedulable.
		if p.Status.StartTime != nil || unschedulable(p) || p.DeletionTimestamp != nil {
			return
		}
		st = &startState{}
		s.tracked[uid] = st
	}
	if !st.runningSeen && p.Status.Phase == corev1.PodRunning {
		st.runningSeen = true
		if !seen.IsZero() {
			s.duration.Observe(now.Sub(seen).Seconds())
		}
	}
	if !st.startedSeen && allContainersStarted(p) {
		st.startedSeen = true
		total := now.Sub(p.CreationTimestamp.Time)
		s.total.Observe(total.Seconds())
		if !stateful(p) {
			s.sli.Observe(max(total-initRuntime(p), 0).Seconds())
		}
	}
}

// forget drops a pod. Call with Manager.mu held.
func (s *startLatency) forget(uid types.UID) { delete(s.tracked, uid) }

// allContainersStarted: every container runs, with its start time (kubelet:
// hasPodStartedSLO).
func allContainersStarted(p *corev1.Pod) bool {
	if len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil || cs.State.Running.StartedAt.IsZero() {
			return false
		}
	}
	return true
}

// initRuntime is how long the init containers ran, from the times of
// their finished instances.
func initRuntime(p *corev1.Pod) time.Duration {
	var d time.Duration
	for _, cs := range p.Status.InitContainerStatuses {
		if t := cs.State.Terminated; t != nil && !t.StartedAt.IsZero() && t.FinishedAt.After(t.StartedAt.Time) {
			d += t.FinishedAt.Sub(t.StartedAt.Time)
		}
	}
	return d
}

// stateful: a volume of another kind than secret, configMap, downwardAPI,
// emptyDir or projected (the SLI's definition of a stateful pod).
func stateful(p *corev1.Pod) bool {
	for i := range p.Spec.Volumes {
		if !stateless(&p.Spec.Volumes[i]) {
			return true
		}
	}
	return false
}

// stateless: a volume of a kind the SLI counts as stateless.
func stateless(v *corev1.Volume) bool {
	return v.Secret != nil || v.ConfigMap != nil || v.DownwardAPI != nil || v.EmptyDir != nil || v.Projected != nil
}

func unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return true
		}
	}
	return false
}
