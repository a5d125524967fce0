package service

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splitlet/splitlet/libs/health"
	"github.com/splitlet/splitlet/libs/runtime"
)

// metrics of one replica: Splitlet's own (namespace splitlet, subsystem
// podworkers), and the kubelet's names and labels for what a pod worker
// does, so that dashboards and alerts written for the kubelet work.
type metrics struct {
	syncDuration *prometheus.HistogramVec
	syncErrors   *prometheus.CounterVec
	// probe execs refused: not a probe command of the pod's container.
	probeExecRefused prometheus.Counter

	// kubelet_pod_worker_duration_seconds{operation_type}
	podWorkerDuration *prometheus.HistogramVec
	// kubelet_started_containers_total{container_type}
	startedContainers *prometheus.CounterVec
	// kubelet_started_containers_errors_total{container_type,code}
	startErrors *prometheus.CounterVec
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
	m.podWorkerDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Subsystem: "kubelet", Name: "pod_worker_duration_seconds",
		Help:    "Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
		Buckets: prometheus.DefBuckets,
	}, []string{"operation_type"})
	m.startedContainers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Subsystem: "kubelet", Name: "started_containers_total",
		Help: "Cumulative number of containers started",
	}, []string{"container_type"})
	m.startErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Subsystem: "kubelet", Name: "started_containers_errors_total",
		Help: "Cumulative number of errors when starting containers",
	}, []string{"container_type", "code"})
	probeExecRefused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "splitlet", Subsystem: "podworkers", Name: "probe_exec_refused_total",
		Help: "Exec requests on runtime.probeexec refused because the command is not an exec probe of the pod's container.",
	}, nil)
	collectors := []prometheus.Collector{
		running{r},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "splitlet", Subsystem: "podworkers", Name: "workers",
			Help: "Pod workers this replica holds.",
		}, func() float64 {
			if c := r.Controller(); c != nil {
				return float64(c.Workers().Len())
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "splitlet", Subsystem: "podworkers", Name: "owned_partitions",
			Help: "Partitions this replica owns and works on (a take-over under way is not counted).",
		}, func() float64 { return float64(len(r.OwnedPartitions())) }),
	}
	// a second replica in one process counts into the first one's series.
	var err error
	if m.syncDuration, err = health.Register(reg, m.syncDuration); err != nil {
		return nil, err
	}
	if m.podWorkerDuration, err = health.Register(reg, m.podWorkerDuration); err != nil {
		return nil, err
	}
	for _, c := range []**prometheus.CounterVec{&m.syncErrors, &m.startedContainers, &m.startErrors, &probeExecRefused} {
		if *c, err = health.Register(reg, *c); err != nil {
			return nil, err
		}
	}
	for _, c := range collectors {
		if _, err := health.Register(reg, c); err != nil {
			return nil, err
		}
	}
	m.probeExecRefused = probeExecRefused.WithLabelValues()
	return m, nil
}

// kubeletOperation is the kubelet's operation_type of a sync step: a pod
// worker's sync is "sync", its termination "kill" (the kubelet's
// SyncPodType names); the terminated step's clean-up has none.
func kubeletOperation(work string) string {
	switch work {
	case "sync":
		return "sync"
	case "terminating":
		return "kill"
	}
	return ""
}

// started counts a container start attempt as the kubelet does.
func (m *metrics) started(containerType, failure string) {
	m.startedContainers.WithLabelValues(containerType).Inc()
	if failure != "" {
		m.startErrors.WithLabelValues(containerType, failure).Inc()
	}
}

// running reports kubelet_running_pods (pods of this replica with a
// running container; the kubelet counts running sandboxes) and
// kubelet_running_containers{container_state} from the runtime, at scrape
// time.
type running struct{ r *Runner }

var (
	runningPodsDesc       = prometheus.NewDesc("kubelet_running_pods", "Number of pods that have a running pod sandbox", nil, nil)
	runningContainersDesc = prometheus.NewDesc("kubelet_running_containers", "Number of containers currently running", []string{"container_state"}, nil)
)

func (running) Describe(ch chan<- *prometheus.Desc) {
	ch <- runningPodsDesc
	ch <- runningContainersDesc
}

func (c running) Collect(ch chan<- prometheus.Metric) {
	c.r.mu.Lock()
	ctrl, rt := c.r.ctrl, c.r.rt
	c.r.mu.Unlock()
	pods := 0
	states := map[string]int{"running": 0, "exited": 0, "created": 0, "unknown": 0}
	if ctrl != nil && rt != nil {
		for _, uid := range ctrl.Workers().Known() {
			live := false
			for _, st := range rt.PodContainers(uid) {
				// kubelet: the container_state values are lower case.
				state := strings.ToLower(string(st.State))
				if _, ok := states[state]; !ok {
					state = "unknown"
				}
				states[state]++
				live = live || st.State == runtime.StateRunning
			}
			if live {
				pods++
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(runningPodsDesc, prometheus.GaugeValue, float64(pods))
	for state, n := range states {
		ch <- prometheus.MustNewConstMetric(runningContainersDesc, prometheus.GaugeValue, float64(n), state)
	}
}

func (m *metrics) observe(work string, d time.Duration, err error) {
	m.syncDuration.WithLabelValues(work).Observe(d.Seconds())
	if op := kubeletOperation(work); op != "" {
		m.podWorkerDuration.WithLabelValues(op).Observe(d.Seconds())
	}
	if err != nil {
		m.syncErrors.WithLabelValues(work).Inc()
	}
}
