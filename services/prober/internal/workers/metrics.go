package workers

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/splitlet/splitlet/libs/health"
)

// The kubelet's prober_probe_total result label values.
const (
	resultSuccessful = "successful"
	resultFailed     = "failed"
	resultUnknown    = "unknown"
)

// metrics are the kubelet's prober metrics.
type metrics struct {
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{total: prometheus.NewCounterVec(prometheus.CounterOpts{
		Subsystem: "prober",
		Name:      "probe_total",
		Help:      "Cumulative number of a liveness, readiness or startup probe for a container by result.",
	}, []string{"probe_type", "result", "container", "pod", "namespace", "pod_uid"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "prober",
			Name:      "probe_duration_seconds",
			Help:      "Duration in seconds for a probe response.",
			Buckets:   prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"probe_type", "container", "pod", "namespace"}),
	}
	if reg != nil {
		var err error
		if m.total, err = health.Register(reg, m.total); err != nil {
			return nil, err
		}
		if m.duration, err = health.Register(reg, m.duration); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// workerCounters are one worker's three series, looked up once so that a
// probe run only increments.
type workerCounters struct {
	vec                       *prometheus.CounterVec
	durations                 *prometheus.HistogramVec
	labels                    [3]prometheus.Labels
	durationLabels            prometheus.Labels
	success, failure, unknown prometheus.Counter
	// duration is observed for successful and unknown runs (kubelet rule).
	duration prometheus.Observer
}

func (m *metrics) forWorker(probeType, container, pod, namespace, uid string) *workerCounters {
	wc := &workerCounters{vec: m.total, durations: m.duration}
	for i, r := range []string{resultSuccessful, resultFailed, resultUnknown} {
		wc.labels[i] = prometheus.Labels{"probe_type": probeType, "result": r, "container": container,
			"pod": pod, "namespace": namespace, "pod_uid": uid}
	}
	wc.success = m.total.With(wc.labels[0])
	wc.failure = m.total.With(wc.labels[1])
	wc.unknown = m.total.With(wc.labels[2])
	wc.durationLabels = prometheus.Labels{"probe_type": probeType, "container": container, "pod": pod, "namespace": namespace}
	wc.duration = m.duration.With(wc.durationLabels)
	return wc
}

// drop removes the worker's series (kubelet: deleted when the worker ends).
func (wc *workerCounters) drop() {
	for _, l := range wc.labels {
		wc.vec.Delete(l)
	}
	wc.durations.Delete(wc.durationLabels)
}
