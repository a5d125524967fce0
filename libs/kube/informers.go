package kube

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
)

// NodePodsFactory returns an informer factory whose pod informers see only
// the pods bound to the node (spec.nodeName=<node>), so that the API server
// sends nothing else, as the kubelet's own watch does.
func NodePodsFactory(cs kubernetes.Interface, node string, resync time.Duration) informers.SharedInformerFactory {
	selector := fields.OneTermEqualSelector("spec.nodeName", node).String()
	return informers.NewSharedInformerFactoryWithOptions(cs, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = selector }))
}
