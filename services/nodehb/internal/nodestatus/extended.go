package nodestatus

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/kube"
)

// ExtendedResources are the device plugin resources the Node states: their
// capacity (every device) and allocatable (the healthy ones).
type ExtendedResources interface {
	Resources() (capacity, allocatable corev1.ResourceList)
}

// WithExtendedResources states the device manager's resources in the
// Node's capacity and allocatable.
func WithExtendedResources(e ExtendedResources) Option {
	return func(c *Controller) { c.extended = e }
}

// setExtended keeps the extended resources the Node had (one a cluster
// added to its status stays, with allocatable its capacity, as the kubelet
// keeps them), then sets the device manager's.
func (c *Controller) setExtended(n *corev1.Node, prevCapacity corev1.ResourceList) {
	for name, q := range prevCapacity {
		if _, own := n.Status.Capacity[name]; own || !kube.IsExtendedResourceName(string(name)) {
			continue
		}
		n.Status.Capacity[name] = q.DeepCopy()
		n.Status.Allocatable[name] = q.DeepCopy()
	}
	if c.extended == nil {
		return
	}
	capacity, allocatable := c.extended.Resources()
	for name, q := range capacity {
		n.Status.Capacity[name] = q
	}
	for name, q := range allocatable {
		n.Status.Allocatable[name] = q
	}
}
