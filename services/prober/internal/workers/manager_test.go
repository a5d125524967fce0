package workers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/services/prober/internal/probe"
)

type recorded struct {
	mu  sync.Mutex
	all []bus.ProbeResult
}

func (r *recorded) sink(p bus.ProbeResult) {
	r.mu.Lock()
	r.all = append(r.all, p)
	r.mu.Unlock()
}

func (r *recorded) list() []bus.ProbeResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bus.ProbeResult(nil), r.all...)
}

type countingExecer struct{ calls atomic.Int64 }

func (c *countingExecer) Exec(context.Context, bus.ExecRequest, time.Duration) (*probe.ExecOutcome, error) {
	c.calls.Add(1)
	return &probe.ExecOutcome{ExitCode: 1}, nil
}

// A container that was running well before the prober started (the
// prober restarted) gets no initial result, and its startup probe does
// not run again: it counts as started (kubelet: restart grace).
func TestContainerRunningBeforeProberStarted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())
	rec := &recorded{}
	ex := &countingExecer{}
	m, err := New(WithSink(rec.sink), WithExecer(ex))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Stop(t.Context()) }()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: "default", UID: "old-uid"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app",
			ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
				HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt(port)}}},
			StartupProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
				Exec: &corev1.ExecAction{Command: []string{"false"}}}},
		}}},
	}
	m.UpdateStatus(&bus.PodRuntimeStatus{UID: pod.UID, Namespace: "default", Name: "old", PodIP: "127.0.0.1",
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", ContainerID: "sim://old",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Now().Add(-time.Minute))}}}}})
	m.UpsertPod(pod)
	testenv.EventuallyTrue(t, 5*time.Second, "a probe result", func() bool { return len(rec.list()) > 0 })
	got := rec.list()
	if got[0].Probe != bus.ProbeReadiness || got[0].Result != bus.ProbeSuccess {
		t.Errorf("first result %+v, want Readiness Success and no initial Failure", got[0])
	}
	if n := ex.calls.Load(); n != 0 {
		t.Errorf("the startup probe ran %d times for a container started before the prober", n)
	}
}

// succeedsAfter is an exec prober whose command fails n times, then succeeds.
type succeedsAfter struct{ n, calls atomic.Int64 }

func (s *succeedsAfter) Exec(context.Context, bus.ExecRequest, time.Duration) (*probe.ExecOutcome, error) {
	if s.calls.Add(1) <= s.n.Load() {
		return &probe.ExecOutcome{ExitCode: 1}, nil
	}
	return &probe.ExecOutcome{ExitCode: 0}, nil
}

// kubelet: once the startup probe succeeds, the readiness probe runs at
// once, not a readiness period later (the conformance spec "should be
// ready immediately after startupProbe succeeds", sidecars included).
func TestReadinessRunsWhenStartupSucceeds(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())
	for _, sidecar := range []bool{false, true} {
		rec := &recorded{}
		ex := &succeedsAfter{}
		ex.n.Store(2)
		m, err := New(WithSink(rec.sink), WithExecer(ex))
		if err != nil {
			t.Fatal(err)
		}
		// a prober up for long: new workers probe at once, not spread
		// over their first period.
		m.start = time.Now().Add(-2 * time.Hour)
		always := corev1.ContainerRestartPolicyAlways
		c := corev1.Container{
			Name: "app",
			// a readiness period far longer than the test: only a run
			// triggered by the startup success can make it ready.
			ReadinessProbe: &corev1.Probe{PeriodSeconds: 3600, ProbeHandler: corev1.ProbeHandler{
				HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt(port)}}},
			StartupProbe: &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 10, ProbeHandler: corev1.ProbeHandler{
				Exec: &corev1.ExecAction{Command: []string{"cat", "/tmp/startup"}}}},
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "slow", Namespace: "default", UID: "slow-uid"}}
		cs := []corev1.ContainerStatus{{Name: "app", ContainerID: "sim://slow",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
		st := &bus.PodRuntimeStatus{UID: pod.UID, Namespace: "default", Name: "slow", PodIP: "127.0.0.1"}
		if sidecar {
			c.RestartPolicy = &always
			pod.Spec.InitContainers = []corev1.Container{c}
			pod.Spec.Containers = []corev1.Container{{Name: "main"}}
			st.InitContainerStatuses = cs
		} else {
			pod.Spec.Containers = []corev1.Container{c}
			st.ContainerStatuses = cs
		}
		m.UpdateStatus(st)
		m.UpsertPod(pod)
		var startedAt time.Time
		deadline := time.Now().Add(20 * time.Second)
		for ready := false; !ready; {
			if time.Now().After(deadline) {
				t.Fatalf("sidecar %v: no readiness success within 20s: %+v", sidecar, rec.list())
			}
			for _, r := range rec.list() {
				if r.Probe == bus.ProbeStartup && r.Result == bus.ProbeSuccess && startedAt.IsZero() {
					startedAt = time.Now()
				}
				ready = ready || r.Probe == bus.ProbeReadiness && r.Result == bus.ProbeSuccess
			}
			time.Sleep(10 * time.Millisecond)
		}
		if startedAt.IsZero() {
			t.Errorf("sidecar %v: ready without a startup success: %+v", sidecar, rec.list())
		}
		_ = m.Stop(t.Context())
	}
}
