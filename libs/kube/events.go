package kube

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// NewRecorder returns an EventRecorder that writes Events as the kubelet
// does (source component "kubelet", host the node), and a function that
// flushes and stops it.
func NewRecorder(cs kubernetes.Interface, node string) (record.EventRecorder, func()) {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	r := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: node})
	return r, b.Shutdown
}

// NodeRef is the object reference Events about the node itself are recorded
// on (the kubelet uses the node name as UID too).
func NodeRef(node string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", Name: node, UID: types.UID(node), Namespace: ""}
}

// PodRef is the reference of a pod for Events, built from what the bus
// carries when the full object is not at hand.
func PodRef(namespace, name string, uid types.UID) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: namespace, Name: name, UID: uid}
}
