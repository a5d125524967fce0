package admission

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/splitlet/splitlet/libs/kube"
)

// ReasonEvicted is the kubelet's reason of a pod refused under node
// pressure (and of an evicted pod).
const ReasonEvicted = "Evicted"

// Pressure refuses pods while the node is under pressure, as the kubelet's
// eviction manager admits: critical pods always pass; under MemoryPressure
// alone, every pod but a BestEffort one that does not tolerate the
// node.kubernetes.io/memory-pressure taint; under any other pressure, none.
// conditions are the node's pressure conditions now (nodehb's NodePressure).
// A pod the node already started (Attributes.Started) passes: a pod worker
// that restarts or takes a partition over admits its pods again, and
// pressure then is the eviction manager's to resolve by ranking, not a
// reason to stop every running pod at once.
func Pressure(conditions func() []corev1.NodeConditionType) Handler {
	return HandlerFunc(func(a *Attributes) Result {
		conds := conditions()
		if len(conds) == 0 || kube.IsCriticalPod(a.Pod) || a.Started {
			return Result{Admit: true}
		}
		if len(conds) == 1 && conds[0] == corev1.NodeMemoryPressure {
			if kube.QOSClass(a.Pod) != corev1.PodQOSBestEffort || toleratesMemoryPressure(a.Pod) {
				return Result{Admit: true}
			}
		}
		return Result{Reason: ReasonEvicted, Message: fmt.Sprintf("The node had condition: %v. ", conds)}
	})
}

func toleratesMemoryPressure(pod *corev1.Pod) bool {
	taint := &corev1.Taint{Key: corev1.TaintNodeMemoryPressure, Effect: corev1.TaintEffectNoSchedule}
	return slices.ContainsFunc(pod.Spec.Tolerations, func(t corev1.Toleration) bool {
		return t.ToleratesTaint(klog.Background(), taint, false)
	})
}
