package kube

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// QOSClass computes the pod's quality of service class from its requests and
// limits of cpu and memory (kubelet: GetPodQOS).
func QOSClass(pod *corev1.Pod) corev1.PodQOSClass {
	tracked := []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory}
	requests, limits := corev1.ResourceList{}, corev1.ResourceList{}
	guaranteed := true
	add := func(into corev1.ResourceList, from corev1.ResourceList) {
		for _, n := range tracked {
			q, ok := from[n]
			if !ok || q.IsZero() {
				continue
			}
			if cur, ok := into[n]; ok {
				cur.Add(q)
				into[n] = cur
			} else {
				into[n] = q.DeepCopy()
			}
		}
	}
	hasAll := func(l corev1.ResourceList) bool {
		for _, n := range tracked {
			if q, ok := l[n]; !ok || q.IsZero() {
				return false
			}
		}
		return true
	}
	if r := pod.Spec.Resources; r != nil && (len(r.Requests) > 0 || len(r.Limits) > 0) {
		add(requests, r.Requests)
		add(limits, r.Limits)
		guaranteed = hasAll(r.Limits)
	} else {
		all := append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
		for _, c := range all {
			add(requests, c.Resources.Requests)
			add(limits, c.Resources.Limits)
			if !hasAll(c.Resources.Limits) {
				guaranteed = false
			}
		}
	}
	if len(requests) == 0 && len(limits) == 0 {
		return corev1.PodQOSBestEffort
	}
	if guaranteed {
		for _, n := range tracked {
			if !quantityEqual(requests[n], limits[n]) {
				guaranteed = false
			}
		}
	}
	if guaranteed && len(requests) == len(limits) {
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}

func quantityEqual(a, b resource.Quantity) bool { return a.Cmp(b) == 0 }

// The OOM score adjustments of the kubelet's QoS tiers.
const (
	guaranteedOOMScoreAdj = -997
	bestEffortOOMScoreAdj = 1000
	// systemCriticalPriority is the priority from which a pod is critical
	// to the node (system-node-critical and above).
	systemCriticalPriority = 2000000000
)

// OOMScoreAdj is the oom_score_adj of container c of the pod on a node
// with memCapacity bytes of memory (kubelet: GetContainerOOMScoreAdjust,
// without pod-level resources): guaranteed pods and the node's critical
// ones last (-997), best-effort first (1000), burstable by how much of the
// node the container requests, within [3, 999]; a sidecar never above the
// regular container that requests least.
func OOMScoreAdj(pod *corev1.Pod, c *corev1.Container, memCapacity int64) int64 {
	if pod.Spec.Priority != nil && *pod.Spec.Priority >= systemCriticalPriority {
		return guaranteedOOMScoreAdj
	}
	qos := pod.Status.QOSClass
	if qos == "" {
		qos = QOSClass(pod)
	}
	switch qos {
	case corev1.PodQOSGuaranteed:
		return guaranteedOOMScoreAdj
	case corev1.PodQOSBestEffort:
		return bestEffortOOMScoreAdj
	}
	if memCapacity <= 0 {
		return bestEffortOOMScoreAdj - 1
	}
	byRequest := func(req int64) int64 { return 1000 - 1000*req/memCapacity }
	adj := byRequest(c.Resources.Requests.Memory().Value())
	if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways && isInit(pod, c.Name) && len(pod.Spec.Containers) > 0 {
		least := pod.Spec.Containers[0].Resources.Requests.Memory().Value()
		for _, rc := range pod.Spec.Containers[1:] {
			least = min(least, rc.Resources.Requests.Memory().Value())
		}
		adj = min(adj, byRequest(least))
	}
	// Above a guaranteed container at its limit, below a best-effort one.
	return max(min(adj, bestEffortOOMScoreAdj-1), 1000+guaranteedOOMScoreAdj)
}

func isInit(pod *corev1.Pod, name string) bool {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return true
		}
	}
	return false
}

// IsCriticalPod: a static pod, a mirror pod, or one of priority
// system-node-critical and above (kubelet: IsCriticalPod). The eviction
// manager never evicts one, and admits one under pressure.
func IsCriticalPod(pod *corev1.Pod) bool {
	if IsStatic(pod) {
		return true
	}
	if _, ok := pod.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		return true
	}
	return pod.Spec.Priority != nil && *pod.Spec.Priority >= systemCriticalPriority
}
