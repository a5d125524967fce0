package eviction

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/splitlet/splitlet/libs/bus"
)

// The kubelet's reason and message parts of an eviction.
const (
	Reason               = "Evicted"
	nodeLowMessageFmt    = "The node was low on resource: %v. "
	thresholdMetFmt      = "Threshold quantity: %v, available: %v. "
	containerMessageFmt  = "Container %s was using %s, request is %s, has larger consumption of %v. "
	nodeConditionMessage = "The node had condition: %v. "
)

// ConditionMessage is the admission message of a node under pressure
// (kubelet: the eviction manager's Admit).
func ConditionMessage(conds []corev1.NodeConditionType) string {
	return fmt.Sprintf(nodeConditionMessage, conds)
}

// memoryUsage is the pod's working set.
func memoryUsage(p *bus.PodStats) *resource.Quantity {
	var ws uint64
	for _, c := range p.Containers {
		ws += c.MemoryWorkingSetBytes
	}
	return resource.NewQuantity(int64(ws), resource.BinarySI)
}

// memoryRequest is the sum of the pod's containers' memory requests.
func memoryRequest(p *bus.PodStats) *resource.Quantity {
	sum := resource.NewQuantity(0, resource.BinarySI)
	for _, c := range p.Containers {
		if c.MemoryRequest != nil {
			sum.Add(*c.MemoryRequest)
		}
	}
	return sum
}

// Rank orders pods for eviction to reclaim res, the first to evict first
// (kubelet: rankMemoryPressure, and for the other resources priority
// alone, as the pod workers report no per-pod disk or process figures):
// for memory, pods whose usage exceeds their requests first, then the
// lower priority, then the larger usage above the requests.
func Rank(res corev1.ResourceName, pods []bus.PodStats) {
	sort.SliceStable(pods, func(i, j int) bool {
		a, b := &pods[i], &pods[j]
		if res == corev1.ResourceMemory {
			ua, ub := memoryUsage(a), memoryUsage(b)
			ea, eb := ua.Cmp(*memoryRequest(a)) > 0, ub.Cmp(*memoryRequest(b)) > 0
			if ea != eb {
				return ea
			}
			if a.Priority != b.Priority {
				return a.Priority < b.Priority
			}
			ua.Sub(*memoryRequest(a))
			ub.Sub(*memoryRequest(b))
			return ua.Cmp(*ub) > 0
		}
		return a.Priority < b.Priority
	})
}

// Message is the eviction message of a pod evicted to reclaim the
// threshold's resource (kubelet: evictionMessage): the resource, the
// threshold and what was available, and for memory each container using
// more than it requested.
func Message(t Threshold, obs Observations, p *bus.PodStats) string {
	res := t.Signal.Resource()
	msg := fmt.Sprintf(nodeLowMessageFmt, res)
	if q, avail, ok := MetInfo(t, obs); ok {
		msg += fmt.Sprintf(thresholdMetFmt, q, avail)
	}
	if res != corev1.ResourceMemory {
		return msg
	}
	for _, c := range p.Containers {
		usage := resource.NewQuantity(int64(c.MemoryWorkingSetBytes), resource.BinarySI)
		req := resource.Quantity{}
		if c.MemoryRequest != nil {
			req = *c.MemoryRequest
		}
		if usage.Cmp(req) > 0 {
			msg += fmt.Sprintf(containerMessageFmt, c.Name, usage.String(), req.String(), res)
		}
	}
	return msg
}

// GracePeriod is the grace period an eviction asks for (kubelet: 1 s for
// a hard threshold; for a soft one eviction-max-pod-grace-period, which
// the pod worker lowers to the pod's own when that is shorter).
func GracePeriod(t Threshold, maxPod int64) int64 {
	if t.Hard {
		return immediateGrace
	}
	return maxPod
}

// immediateGrace is the kubelet's grace period of an eviction for a hard
// threshold or a local storage limit.
const immediateGrace = 1
