package bus

import (
	"fmt"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Metrics are the bus's Prometheus vectors (docs/metrics.md): what Consume,
// Follow and Recover count, and where a new pod's time goes stage by stage.
// A process builds one against its registry (NewMetrics) and hands it to
// the stages it runs; the options' nil Metrics counts nowhere.
type Metrics struct {
	// HandlerPanics counts the handler panics Consume, Follow and Recover
	// recovered, by consumer.
	HandlerPanics *prometheus.CounterVec
	// HandlerTerminations counts the messages Consume terminated because
	// their handler failed on every delivery, by consumer.
	HandlerTerminations *prometheus.CounterVec
	// PodStageDuration is the time a new pod spent in one stage, observed
	// once per pod: podconfig (from its first sight of the pod to the
	// publish of its ADD), podworkers (from the ADD's arrival to the first
	// status with every container running), statussync (from that status's
	// arrival to the patch that writes it).
	PodStageDuration *prometheus.HistogramVec
	// BusDelivery is the time from a message's sentAt to its arrival at a
	// consumer, by stream: the bus's share between two stages (the
	// publishers' and the consumers' clocks are the host's, or kept in
	// step).
	BusDelivery *prometheus.HistogramVec
}

// NewMetrics builds the bus's vectors and registers them with reg (none
// when reg is nil); a second set on one registry is an error.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := newMetrics()
	if reg == nil {
		return m, nil
	}
	for _, c := range m.collectors() {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("bus: metrics: %w", err)
		}
	}
	return m, nil
}

func newMetrics() *Metrics {
	return &Metrics{
		HandlerPanics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "splitlet_bus_handler_panics_total",
			Help: "Bus message handlers that panicked; the message was retried, then terminated after " + fmt.Sprint(MaxPanicDeliveries) + " deliveries.",
		}, []string{"consumer"}),
		HandlerTerminations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "splitlet_bus_handler_terminated_total",
			Help: "Bus messages terminated after their handler failed on each delivery (" + fmt.Sprint(DefaultMaxDeliveries) +
				" errors or " + fmt.Sprint(MaxPanicDeliveries) + " panics); their pods are recovered from the next snapshot or the stream.",
		}, []string{"consumer"}),
		PodStageDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "splitlet_pod_stage_duration_seconds",
			Help:    "Time a new pod spent in a stage on its way to running (podconfig, podworkers, statussync), once per pod.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18), // 1 ms to 131 s
		}, []string{"stage"}),
		BusDelivery: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "splitlet_bus_delivery_seconds",
			Help:    "Time from a bus message's sentAt to its arrival at a durable consumer, by stream.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18), // 0.5 ms to 65 s
		}, []string{"stream"}),
	}
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.HandlerPanics, m.HandlerTerminations, m.PodStageDuration, m.BusDelivery}
}

// orUnregistered is m, or for nil a set of its own that no registry
// serves, so that the code that counts needs no nil check.
func (m *Metrics) orUnregistered() *Metrics {
	if m == nil {
		return newMetrics()
	}
	return m
}

// ObserveStage records d for a stage (a Stage* name); nothing on a nil m.
func (m *Metrics) ObserveStage(stage string, d time.Duration) {
	if m == nil {
		return
	}
	m.PodStageDuration.WithLabelValues(stage).Observe(max(d, 0).Seconds())
}

// Recover runs a request handler (a plain NATS subscription: runtime
// requests, replies) so that a panic does not take the stage down: it is
// logged with the subject, counted in HandlerPanics under the given name
// (on a non-nil m), and reported as the error returned (the caller answers
// the requester).
func (m *Metrics) Recover(log *zap.Logger, name, subject string, fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if m != nil {
				m.HandlerPanics.WithLabelValues(name).Inc()
			}
			log.Error("request handler panicked", zap.String("subject", subject), zap.Any("panic", r),
				zap.ByteString("stack", debug.Stack()))
			err = fmt.Errorf("internal error handling %s", subject)
		}
	}()
	fn()
	return nil
}
