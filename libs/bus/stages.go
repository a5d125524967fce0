package bus

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// AnnotationSeen is when podconfig first saw a pod, RFC 3339 with
// nanoseconds, on every pod it publishes (kubelet: the config.seen
// annotation of its config package).
const AnnotationSeen = "kubernetes.io/config.seen"

// FirstSeen reads a pod's AnnotationSeen; zero when absent or malformed.
func FirstSeen(p *corev1.Pod) time.Time {
	if p == nil {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, p.Annotations[AnnotationSeen])
	if err != nil {
		return time.Time{}
	}
	return t
}

// streamLabel is a stream's short name (podupdates, ...), the label of
// Metrics.BusDelivery: the node's token would make one series per node.
func streamLabel(stream string) string {
	if i := strings.LastIndexByte(stream, '_'); i >= 0 {
		return stream[i+1:]
	}
	return stream
}

// AllRunning says whether container statuses show every container of a
// pod running, which is where a new pod's start ends in
// Metrics.PodStageDuration.
func AllRunning(cs []corev1.ContainerStatus) bool {
	if len(cs) == 0 {
		return false
	}
	for _, c := range cs {
		if c.State.Running == nil {
			return false
		}
	}
	return true
}
