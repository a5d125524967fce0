package workers

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// The kubelet's prober_probe_total result label values.
const (
	resultSuccessful = "successful"
	resultFailed     = "failed"
	resultUnknown    = "unknown"
)

// metrics are the kubelet's prober metrics.
type metrics struct {
	total *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{total: prometheus.NewCounterVec(prometheus.CounterOpts{
		Subsystem: "prober",
		Name:      "probe_total",
		Help:      "Cumulative number of a liveness, readiness or startup probe for a container by result.",
	}, []string{"probe_type", "result", "container", "pod", "namespace", "pod_uid"})}
	if reg != nil {
		if err := reg.Register(m.total); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
			existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
			if !ok {
				return nil, err
			}
			m.total = existing
		}
	}
	return m, nil
}

// workerCounters are one worker's three series, looked up once so that a
// probe run only increments.
type workerCounters struct {
	vec                       *prometheus.CounterVec
	labels                    [3]prometheus.Labels
	success, failure, unknown prometheus.Counter
}

func (m *metrics) forWorker(probeType, container, pod, namespace, uid string) *workerCounters {
	wc := &workerCounters{vec: m.total}
	for i, r := range []string{resultSuccessful, resultFailed, resultUnknown} {
		wc.labels[i] = prometheus.Labels{"probe_type": probeType, "result": r, "container": container,
			"pod": pod, "namespace": namespace, "pod_uid": uid}
	}
	wc.success = m.total.With(wc.labels[0])
	wc.failure = m.total.With(wc.labels[1])
	wc.unknown = m.total.With(wc.labels[2])
	return wc
}

// drop removes the worker's series (kubelet: deleted when the worker ends).
func (wc *workerCounters) drop() {
	for _, l := range wc.labels {
		wc.vec.Delete(l)
	}
}
