package workers

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/services/prober/internal/probe"
)

// BenchmarkProbeRate runs the benchmark case: 5000 pods with one
// readiness and one liveness probe each (period 1 s) on one manager,
// against local targets, and reports the achieved probe rate (counted at
// the targets) against the configured one, the drift, CPU and memory.
// PROBER_BENCH_PODS and PROBER_BENCH_WINDOW (a duration) change the size
// and the measured window (default 10 s, after one period of warm-up).
//
// The cases: "tcp" and "http" probe real sockets on 127.0.0.x, so the
// kernel's loopback TCP work of both ends (connect, accept, FIN, TIME_WAIT)
// is charged to this process and dominates its CPU; "exec" answers exec
// probes in memory and so measures the workers' own scheduling.
func BenchmarkProbeRate(b *testing.B) {
	for _, kind := range []string{"exec", "tcp", "http"} {
		b.Run(kind, func(b *testing.B) { benchProbeRate(b, kind) })
	}
}

func benchProbeRate(b *testing.B, kind string) {
	pods := envInt(b, "PROBER_BENCH_PODS", 5000)
	window := 10 * time.Second
	if v := os.Getenv("PROBER_BENCH_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("PROBER_BENCH_WINDOW: %v", err)
		}
		window = d
	}
	// Targets on several loopback addresses, so that the probes' closed
	// connections do not crowd one address's port space.
	const targets = 8
	var accepted atomic.Int64
	addrs := make([]*net.TCPAddr, targets)
	for i := range targets {
		if kind == "exec" {
			break
		}
		lc := net.ListenConfig{KeepAlive: -1}
		l, err := lc.Listen(context.Background(), "tcp", fmt.Sprintf("127.0.0.%d:0", i+1))
		if err != nil {
			b.Fatal(err)
		}
		addrs[i] = l.Addr().(*net.TCPAddr)
		if kind == "http" {
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				accepted.Add(1)
				_, _ = io.WriteString(w, "ok")
			}), ReadHeaderTimeout: 5 * time.Second}
			go func() { _ = srv.Serve(l) }()
			b.Cleanup(func() { _ = srv.Close() })
			continue
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				// Let the prober close first, as a server that waits for
				// its client does: the TIME_WAIT stays on the prober's
				// side, where loopback port reuse applies.
				go func() {
					_, _ = c.Read(make([]byte, 1))
					_ = c.Close()
				}()
			}
		}()
		b.Cleanup(func() { _ = l.Close() })
	}

	var published atomic.Int64
	var lastFailure atomic.Value
	m, err := New(WithSink(func(r bus.ProbeResult) {
		published.Add(1)
		if r.Result == bus.ProbeFailure {
			lastFailure.Store(r.Message)
		}
	}), WithExecer(instantExecer{&accepted}))
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := m.Stop(ctx); err != nil {
			b.Error(err)
		}
	}()
	started := metav1.Now()
	begin := time.Now()
	for i := range pods {
		a := addrs[i%targets]
		handler := func() corev1.ProbeHandler {
			if kind == "exec" {
				return corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}
			}
			if kind == "http" {
				return corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: a.IP.String(), Port: intstr.FromInt(a.Port), Path: "/healthz"}}
			}
			return corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Host: a.IP.String(), Port: intstr.FromInt(a.Port)}}
		}
		uid := types.UID("bench-" + strconv.Itoa(i))
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p" + strconv.Itoa(i), Namespace: "bench", UID: uid},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name:           "app",
				ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: handler()},
				LivenessProbe:  &corev1.Probe{PeriodSeconds: 1, ProbeHandler: handler()},
			}}},
		}
		m.UpsertPod(pod)
	}
	// The pods came within the manager's first period, so their first runs
	// spread over a period (kubelet rule); they wait for status on that
	// grid.
	if d := time.Since(begin); d > time.Second {
		b.Logf("adding the pods took %v, more than a period: some first runs are not spread", d)
	}
	for i := range pods {
		uid := types.UID("bench-" + strconv.Itoa(i))
		m.UpdateStatus(&bus.PodRuntimeStatus{UID: uid, Namespace: "bench", Name: "p" + strconv.Itoa(i), PodIP: "127.0.0.1",
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", ContainerID: "sim://" + string(uid),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}}})
	}
	if got := m.Workers(); got != 2*pods {
		b.Fatalf("%d workers, want %d", got, 2*pods)
	}
	// Warm-up: every worker has seen its status and run once.
	time.Sleep(2 * time.Second)

	b.ResetTimer()
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	a0 := accepted.Load()
	t0 := time.Now()
	time.Sleep(window)
	a1 := accepted.Load()
	elapsed := time.Since(t0)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	b.StopTimer()

	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	achieved := float64(a1-a0) / elapsed.Seconds()
	configured := float64(2 * pods) // two probes a pod, one a second each
	drift := 100 * (configured - achieved) / configured
	cpu := (tv(ru1.Utime) + tv(ru1.Stime) - tv(ru0.Utime) - tv(ru0.Stime)) / elapsed.Seconds()
	b.ReportMetric(achieved, "probes/s")
	b.ReportMetric(configured, "configured-probes/s")
	b.ReportMetric(drift, "drift-%")
	b.ReportMetric(cpu, "cpu-cores")
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(runtime.NumGoroutine()), "goroutines")
	b.Logf("%s: %d pods, %.0f probes/s of %.0f configured (drift %.1f%%), %.2f cores, %d results published",
		kind, pods, achieved, configured, drift, cpu, published.Load())
	if msg, ok := lastFailure.Load().(string); ok {
		b.Logf("a failure: %s", msg)
	}
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s: %q is not a positive number", name, v)
	}
	return n
}

// instantExecer answers every exec probe at once with exit code 0.
type instantExecer struct{ count *atomic.Int64 }

func (e instantExecer) Exec(context.Context, bus.ExecRequest, time.Duration) (*probe.ExecOutcome, error) {
	e.count.Add(1)
	return &probe.ExecOutcome{}, nil
}
