package service

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of one replica (namespace splitlet, subsystem podworkers).
type metrics struct {
	syncDuration *prometheus.HistogramVec
	syncErrors   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, r *Runner) (*metrics, error) {
	m := &metrics{
		syncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "splitlet", Subsystem: "podworkers", Name: "sync_duration_seconds",
			Help:    "Duration of pod sync steps (sync, terminating, terminated).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}, []string{"work"}),
		syncErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "splitlet", Subsystem: "podworkers", Name: "sync_errors_total",
			Help: "Pod sync steps that failed (and will be retried).",
		}, []string{"work"}),
	}
	collectors := []prometheus.Collector{
		m.syncDuration, m.syncErrors,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "splitlet", Subsystem: "podworkers", Name: "workers",
			Help: "Pod workers this replica holds.",
		}, func() float64 {
			if c := r.Controller(); c != nil {
				return float64(len(c.Workers().Known()))
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "splitlet", Subsystem: "podworkers", Name: "owned_partitions",
			Help: "Partitions this replica owns.",
		}, func() float64 { return float64(len(r.OwnedPartitions())) }),
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *metrics) observe(work string, d time.Duration, err error) {
	m.syncDuration.WithLabelValues(work).Observe(d.Seconds())
	if err != nil {
		m.syncErrors.WithLabelValues(work).Inc()
	}
}
