package kube

import (
	"fmt"

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

// ContainerRef points at one container of a pod, so that an Event about
// it names the container (kubelet: GenerateContainerRef; the field path is
// spec.containers{name} or spec.initContainers{name}).
func ContainerRef(pod *corev1.Pod, name string) *corev1.ObjectReference {
	path := fmt.Sprintf("spec.containers{%s}", name)
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			path = fmt.Sprintf("spec.initContainers{%s}", name)
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Name == name {
			path = fmt.Sprintf("spec.ephemeralContainers{%s}", name)
		}
	}
	return &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name,
		UID: pod.UID, ResourceVersion: pod.ResourceVersion, FieldPath: path}
}
