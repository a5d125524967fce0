package controller

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/services/podworkers/internal/podworker"
)

// ErrNotHeld: the replica holds no pod of that UID.
var ErrNotHeld = errors.New("pod not held")

// Eviction is one eviction asked of the pod workers.
type Eviction struct {
	UID             types.UID
	Reason, Message string
	GracePeriod     int64
	// DisruptionTarget adds the DisruptionTarget condition (reason
	// TerminationByKubelet) to the failed pod's status.
	DisruptionTarget bool
}

// Evict fails a held pod and stops it (kubelet: the eviction manager's
// evictPod): store must durably record the pod's Failed status (the
// podstatus stream) before anything else happens, so that the eviction
// outlives a kill of this replica; then the Event, then the kill. A pod
// evicted before, or already terminating or finished, is left alone
// (already). A critical pod is refused.
func (c *Controller) Evict(ctx context.Context, ev Eviction, store func(context.Context, *bus.PodRuntimeStatus) error) (already bool, err error) {
	c.mu.Lock()
	e, ok := c.pods[ev.UID]
	if !ok {
		c.mu.Unlock()
		return false, ErrNotHeld
	}
	pod := e.pod
	switch {
	case e.evicted || e.rejected || isTerminal(pod) || pod.DeletionTimestamp != nil || c.workers.IsPodTerminationRequested(ev.UID):
		c.mu.Unlock()
		return true, nil
	case kube.IsCriticalPod(pod):
		c.mu.Unlock()
		return false, fmt.Errorf("cannot evict a critical pod")
	}
	e.evicted = true
	c.mu.Unlock()
	var conds []corev1.PodCondition
	if ev.DisruptionTarget {
		conds = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, ObservedGeneration: pod.Generation,
			LastTransitionTime: metav1.Now().Rfc3339Copy(), Reason: corev1.PodReasonTerminationByKubelet, Message: ev.Message}}
	}
	st := c.syncer.CurrentStatus(pod)
	st.Phase, st.Reason, st.Message, st.Terminating, st.Conditions = corev1.PodFailed, ev.Reason, ev.Message, true, conds
	if err := store(ctx, st); err != nil {
		c.mu.Lock()
		e.evicted = false
		c.mu.Unlock()
		return false, fmt.Errorf("storing the eviction status: %w", err)
	}
	c.log.Info("evicting pod", append(podLog(pod), zap.String("message", ev.Message))...)
	c.cfg.Recorder.Eventf(pod, corev1.EventTypeWarning, ev.Reason, "%s", ev.Message)
	grace := ev.GracePeriod
	c.workers.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateKill, Pod: pod, Kill: &podworker.KillOptions{
		Evict: true, GracePeriodOverride: &grace, Phase: corev1.PodFailed, Reason: ev.Reason, Message: ev.Message, Conditions: conds}})
	return false, nil
}
