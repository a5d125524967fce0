package admission

import (
	goruntime "runtime"

	corev1 "k8s.io/api/core/v1"
)

// The reasons of a pod meant for another operating system (kubelet:
// lifecycle.PodOSSelectorNodeLabelDoesNotMatch, PodOSNotSupported).
const (
	ReasonPodOSSelectorNodeLabelDoesNotMatch = "PodOSSelectorNodeLabelDoesNotMatch"
	ReasonPodOSNotSupported                  = "PodOSNotSupported"
)

// PodOS rejects a pod for another operating system than the node's, before
// any check that freeing resources could help with, as the kubelet does: a
// pod labelled kubernetes.io/os with another OS, or whose spec.os names
// another.
func PodOS() Handler {
	return podOS(goruntime.GOOS)
}

func podOS(nodeOS string) Handler {
	return HandlerFunc(func(a *Attributes) Result {
		// kubelet rule: the pod's own label is compared, not its node
		// selector (the scheduler has matched that already).
		if os, ok := a.Pod.Labels[corev1.LabelOSStable]; ok && os != nodeOS {
			return Result{Reason: ReasonPodOSSelectorNodeLabelDoesNotMatch, Message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"}
		}
		if a.Pod.Spec.OS != nil && string(a.Pod.Spec.OS.Name) != nodeOS {
			return Result{Reason: ReasonPodOSNotSupported, Message: "Failed to admit pod as the OS field doesn't match node OS"}
		}
		return Result{Admit: true}
	})
}
