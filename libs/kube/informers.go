package kube

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// NodePodsFactory returns an informer factory whose pod informers see only
// the pods bound to the node (spec.nodeName=<node>), so that the API server
// sends nothing else, as the kubelet's own watch does. Managed fields, of no
// use to an agent and much of a pod's weight, are dropped before caching.
func NodePodsFactory(cs kubernetes.Interface, node string, resync time.Duration) informers.SharedInformerFactory {
	return NodePodsFactoryWith(cs, node, resync, StripManagedFields)
}

// NodePodsFactoryWith is NodePodsFactory with a transform of its own, for a
// stage that caches only the part of each pod it reads.
func NodePodsFactoryWith(cs kubernetes.Interface, node string, resync time.Duration, transform cache.TransformFunc) informers.SharedInformerFactory {
	selector := NodePodsSelector(node)
	return informers.NewSharedInformerFactoryWithOptions(cs, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = selector }),
		informers.WithTransform(transform))
}

// NodePodsSelector is the field selector of the pods bound to the node.
func NodePodsSelector(node string) string {
	return fields.OneTermEqualSelector("spec.nodeName", node).String()
}

// StripManagedFields is an informer transform that drops an object's managed
// fields.
func StripManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
