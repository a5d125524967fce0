package kube

import corev1 "k8s.io/api/core/v1"

// AnnotationConfigSource names where a node agent took a pod from (kubelet:
// kubetypes.ConfigSourceAnnotationKey): SourceAPI, or "file" and "http" for
// a static pod. podconfig sets it on every pod it publishes.
const AnnotationConfigSource = "kubernetes.io/config.source"

// SourceAPI is AnnotationConfigSource's value for a pod of the API server.
const SourceAPI = "api"

// IsStatic says whether the pod comes from a static source (file, http),
// not from the API server (kubelet: kubetypes.IsStaticPod).
func IsStatic(p *corev1.Pod) bool {
	src, ok := p.Annotations[AnnotationConfigSource]
	return ok && src != SourceAPI
}
