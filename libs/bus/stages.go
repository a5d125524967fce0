package bus

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
)

// Where a new pod's time goes on its way to running, stage by stage, for
// experimenters (docs/metrics.md). Register both where the process's
// metrics are served.
var (
	// PodStageDuration is the time a new pod spent in one stage, observed
	// once per pod: podconfig (from its first sight of the pod to the
	// publish of its ADD), podworkers (from the ADD's arrival to the first
	// status with every container running), statussync (from that status's
	// arrival to the patch that writes it).
	PodStageDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "splitlet_pod_stage_duration_seconds",
		Help:    "Time a new pod spent in a stage on its way to running (podconfig, podworkers, statussync), once per pod.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 18), // 1 ms to 131 s
	}, []string{"stage"})
	// BusDelivery is the time from a message's sentAt to its arrival at a
	// consumer, by stream: the bus's share between two stages (the
	// publishers' and the consumers' clocks are the host's, or kept in step).
	BusDelivery = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "splitlet_bus_delivery_seconds",
		Help:    "Time from a bus message's sentAt to its arrival at a durable consumer, by stream.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18), // 0.5 ms to 65 s
	}, []string{"stream"})
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

// ObserveStage records d for a stage (a Stage* name).
func ObserveStage(stage string, d time.Duration) {
	PodStageDuration.WithLabelValues(stage).Observe(max(d, 0).Seconds())
}

// streamLabel is a stream's short name (podupdates, ...), the label of
// BusDelivery: the node's token would make one series per node.
func streamLabel(stream string) string {
	if i := strings.LastIndexByte(stream, '_'); i >= 0 {
		return stream[i+1:]
	}
	return stream
}

// AllRunning says whether container statuses show every container of a
// pod running, which is where a new pod's start ends in PodStageDuration.
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
