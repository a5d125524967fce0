package nodestatus

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/splitlet/splitlet/services/nodehb/internal/eviction"
)

// DefaultEvictionHard is the kubelet's default --eviction-hard.
const DefaultEvictionHard = eviction.DefaultHard

// evictionResources maps the eviction signals that reserve part of a
// resource from allocatable to that resource (kubelet: the hard thresholds
// of memory.available and nodefs.available).
var evictionResources = map[eviction.Signal]corev1.ResourceName{
	eviction.MemoryAvailable: corev1.ResourceMemory,
	eviction.NodeFsAvailable: corev1.ResourceEphemeralStorage,
}

// Allocatable is capacity less the reservations (kube-reserved,
// system-reserved) and the hard eviction thresholds of memory and the
// node's file system, never below zero (kubelet: the node allocatable
// reservation). A threshold's percentage is of the resource's capacity.
func Allocatable(capacity corev1.ResourceList, thresholds []eviction.Threshold, reserved ...corev1.ResourceList) corev1.ResourceList {
	out := capacity.DeepCopy()
	sub := func(name corev1.ResourceName, q resource.Quantity) {
		if c, ok := out[name]; ok {
			c.Sub(q)
			out[name] = c
		}
	}
	for _, r := range reserved {
		for name, q := range r {
			sub(name, q)
		}
	}
	for _, t := range thresholds {
		if name, ok := evictionResources[t.Signal]; ok && t.Hard {
			c := capacity[name]
			sub(name, *t.Value.Of(c.Value(), resource.BinarySI))
		}
	}
	for name, q := range out {
		if q.Sign() < 0 {
			out[name] = *resource.NewQuantity(0, q.Format)
		}
	}
	return out
}
