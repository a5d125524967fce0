package service_test

import (
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/splitlet/splitlet/libs/bus"
)

func intOrStr(port int) intstr.IntOrString { return intstr.FromInt32(int32(port)) }

// countingTarget serves 200 or 500 as set and counts what it served.
type countingTarget struct {
	*target
	ok, failed atomic.Int64
}

func newCountingTarget(t *testing.T, status int) *countingTarget {
	ct := &countingTarget{target: &target{}}
	ct.status.Store(int32(status))
	ct.srv = newServer(t, func(w http.ResponseWriter, r *http.Request) {
		ct.hits.Add(1)
		ct.ua.Store(r.Header.Get("User-Agent"))
		s := int(ct.status.Load())
		if s >= 200 && s < 400 {
			ct.ok.Add(1)
		} else {
			ct.failed.Add(1)
		}
		w.WriteHeader(s)
	})
	return ct
}

// Readiness over HTTP: the initial Failure, Success only after
// successThreshold successes, Failure only after failureThreshold
// failures, the kubelet's User-Agent, Unhealthy Events and the
// prober_probe_total counter.
func TestHTTPReadinessThresholds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := newCountingTarget(t, http.StatusOK)
	rp := httpProbe(tg.port(), "/healthz")
	rp.SuccessThreshold = 2
	rp.FailureThreshold = 3
	pod := newPod("ready-http", rp, nil, nil)
	e.publishPods(bus.OpAdd, pod)
	e.publishStatus(running(pod, "sim://r1", time.Now()))

	first := e.waitResult(pod.UID, bus.ProbeReadiness, bus.ProbeFailure, "sim://r1", 5*time.Second)
	if first.Message != "" || first.Container != "app" || first.Name != "ready-http" || first.Namespace != "default" {
		t.Errorf("initial result %+v", first)
	}
	e.waitResult(pod.UID, bus.ProbeReadiness, bus.ProbeSuccess, "sim://r1", 10*time.Second)
	if n := tg.ok.Load(); n < 2 {
		t.Errorf("Success after %d successful probes, want successThreshold 2", n)
	}
	if ua, _ := tg.ua.Load().(string); ua != "kube-probe/1.36" {
		t.Errorf("User-Agent %q", ua)
	}

	tg.status.Store(http.StatusInternalServerError)
	n := len(e.resultsOf(pod.UID))
	e.eventually("readiness back to Failure", 15*time.Second, func() bool {
		r, _ := e.last(pod.UID, bus.ProbeReadiness)
		return len(e.resultsOf(pod.UID)) > n && r.Result == bus.ProbeFailure
	})
	r, _ := e.last(pod.UID, bus.ProbeReadiness)
	if r.Message != "HTTP probe failed with statuscode: 500" {
		t.Errorf("failure message %q", r.Message)
	}
	if f := tg.failed.Load(); f < 3 {
		t.Errorf("Failure after %d failed probes, want failureThreshold 3", f)
	}
	if !e.events.find(string(pod.UID) + " spec.containers{app} Warning Unhealthy Readiness probe failed: HTTP probe failed with statuscode: 500") {
		t.Errorf("no Unhealthy event; have %v", e.events.all)
	}
	counts := probeTotals(t, e, string(pod.UID))
	if counts["Readiness/successful"] < 2 || counts["Readiness/failed"] < 3 {
		t.Errorf("prober_probe_total %v", counts)
	}
}

// Liveness: a failure holds the worker (no more probes) until a new
// container ID appears, which starts again from the initial Success.
func TestLivenessHoldsUntilNewContainer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	live := newCountingTarget(t, http.StatusInternalServerError)
	clock := newCountingTarget(t, http.StatusOK)
	lp := httpProbe(live.port(), "/live")
	lp.FailureThreshold = 1
	pod := newPod("live-hold", httpProbe(clock.port(), "/ready"), lp, nil)
	e.publishPods(bus.OpAdd, pod)
	e.publishStatus(running(pod, "sim://l1", time.Now()))

	e.waitResult(pod.UID, bus.ProbeLiveness, bus.ProbeSuccess, "sim://l1", 5*time.Second)
	failed := e.waitResult(pod.UID, bus.ProbeLiveness, bus.ProbeFailure, "sim://l1", 5*time.Second)
	if !strings.Contains(failed.Message, "statuscode: 500") {
		t.Errorf("message %q", failed.Message)
	}
	held := live.hits.Load()
	// The readiness probe of the same container is the clock: three more
	// of its runs are more than two liveness periods.
	c0 := clock.hits.Load()
	e.eventually("three readiness runs", 10*time.Second, func() bool { return clock.hits.Load() >= c0+3 })
	if got := live.hits.Load(); got != held {
		t.Errorf("liveness probed %d times while on hold", got-held)
	}
	if !e.events.find("Warning Unhealthy Liveness probe failed: HTTP probe failed with statuscode: 500") {
		t.Errorf("no Liveness Unhealthy event: %v", e.events.all)
	}

	// The runtime restarted the container.
	e.publishStatus(running(pod, "sim://l2", time.Now()))
	e.waitResult(pod.UID, bus.ProbeLiveness, bus.ProbeSuccess, "sim://l2", 5*time.Second)
	e.waitResult(pod.UID, bus.ProbeLiveness, bus.ProbeFailure, "sim://l2", 5*time.Second)
	if live.hits.Load() <= held {
		t.Error("no liveness probe on the new container")
	}
}

// initialDelaySeconds counts from the container's start.
func TestInitialDelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var firstHit atomic.Int64
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		firstHit.CompareAndSwap(0, time.Now().UnixNano())
	})
	rp := httpProbe(portOf(srv.URL), "/")
	rp.InitialDelaySeconds = 2
	pod := newPod("delay", rp, nil, nil)
	started := time.Now().Truncate(time.Second) // the wire keeps whole seconds
	e.publishPods(bus.OpAdd, pod)
	e.publishStatus(running(pod, "sim://d1", started))
	e.waitResult(pod.UID, bus.ProbeReadiness, bus.ProbeSuccess, "sim://d1", 10*time.Second)
	if d := time.Unix(0, firstHit.Load()).Sub(started); d < 2*time.Second {
		t.Errorf("first probe %v after the container started, want at least initialDelaySeconds 2", d)
	}
}

// Startup gating: readiness and liveness wait until the startup probe has
// succeeded; then the startup probe stops.
func TestStartupGating(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ready := newCountingTarget(t, http.StatusOK)
	live := newCountingTarget(t, http.StatusOK)
	sp := execProbe("check-started")
	sp.FailureThreshold = 10
	pod := newPod("startup", httpProbe(ready.port(), "/r"), httpProbe(live.port(), "/l"), sp)
	var calls, early atomic.Int64
	e.onExec(pod.UID, func(req *bus.ExecRequest) *bus.ExecResult {
		if req.Container != "app" || req.Command[0] != "check-started" || req.TimeoutSeconds != 1 {
			t.Errorf("exec request %+v", req)
		}
		if ready.hits.Load()+live.hits.Load() > 0 {
			early.Add(1)
		}
		if calls.Add(1) < 3 {
			return &bus.ExecResult{Stdout: []byte("not yet"), ExitCode: 1}
		}
		return &bus.ExecResult{ExitCode: 0}
	})
	e.publishPods(bus.OpAdd, pod)
	e.publishStatus(running(pod, "sim://s1", time.Now()))

	e.waitResult(pod.UID, bus.ProbeStartup, bus.ProbeUnknown, "sim://s1", 5*time.Second)
	e.waitResult(pod.UID, bus.ProbeStartup, bus.ProbeSuccess, "sim://s1", 10*time.Second)
	e.waitResult(pod.UID, bus.ProbeReadiness, bus.ProbeSuccess, "sim://s1", 5*time.Second)
	if early.Load() > 0 {
		t.Errorf("readiness or liveness probed before the startup probe succeeded")
	}
	if !e.events.find("Warning Unhealthy Startup probe failed: not yet") {
		t.Errorf("no Startup Unhealthy event: %v", e.events.all)
	}
	n := calls.Load()
	r0 := ready.hits.Load()
	e.eventually("three more readiness runs", 10*time.Second, func() bool { return ready.hits.Load() >= r0+3 })
	if calls.Load() != n {
		t.Errorf("startup probe ran %d more times after it succeeded", calls.Load()-n)
	}
	if live.hits.Load() == 0 {
		t.Error("liveness never ran after startup")
	}
}

// A failed startup probe holds too, until a new container.
func TestStartupFailureHolds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sp := execProbe("false")
	sp.FailureThreshold = 2
	clock := newCountingTarget(t, http.StatusOK)
	pod := newPod("startup-fail", nil, nil, sp)
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "clock", ReadinessProbe: httpProbe(clock.port(), "/")})
	var calls atomic.Int64
	e.onExec(pod.UID, func(*bus.ExecRequest) *bus.ExecResult {
		calls.Add(1)
		return &bus.ExecResult{ExitCode: 1}
	})
	e.publishPods(bus.OpAdd, pod)
	st := running(pod, "sim://f1", time.Now())
	st.ContainerStatuses = append(st.ContainerStatuses, running(pod, "sim://clock", time.Now()).ContainerStatuses[0])
	st.ContainerStatuses[1].Name = "clock"
	e.publishStatus(st)
	e.waitResult(pod.UID, bus.ProbeStartup, bus.ProbeFailure, "sim://f1", 10*time.Second)
	if n := calls.Load(); n < 2 {
		t.Errorf("Failure after %d runs, want failureThreshold 2", n)
	}
	n := calls.Load()
	c0 := clock.hits.Load()
	e.eventually("three clock runs", 10*time.Second, func() bool { return clock.hits.Load() >= c0+3 })
	if calls.Load() != n {
		t.Errorf("startup probe ran %d times on hold", calls.Load()-n)
	}
}

// Exec probes through the runtime: exit 0, exit 1, and a runtime that
// never answers (a timeout failure, and the worker keeps going).
func TestExecProbes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ok := newPod("exec-ok", execProbe("true"), nil, nil)
	bad := newPod("exec-bad", execProbe("false"), nil, nil)
	lp := execProbe("sleep", "10")
	lp.FailureThreshold = 1
	hang := newPod("exec-hang", nil, lp, nil)
	rp := execProbe("sleep", "10")
	rp.SuccessThreshold = 1
	hangReady := newPod("exec-hang-ready", rp, nil, nil)
	e.onExec(ok.UID, func(*bus.ExecRequest) *bus.ExecResult { return &bus.ExecResult{Stdout: []byte("fine")} })
	e.onExec(bad.UID, func(*bus.ExecRequest) *bus.ExecResult {
		return &bus.ExecResult{Stderr: []byte("nope"), ExitCode: 1}
	})
	var hangs atomic.Int64
	never := func(*bus.ExecRequest) *bus.ExecResult { hangs.Add(1); return nil }
	e.onExec(hang.UID, never)
	e.onExec(hangReady.UID, never)
	e.publishPods(bus.OpAdd, ok, bad, hang, hangReady)
	for i, p := range []*corev1.Pod{ok, bad, hang, hangReady} {
		e.publishStatus(running(p, "sim://e"+string(rune('a'+i)), time.Now()))
	}
	e.waitResult(ok.UID, bus.ProbeReadiness, bus.ProbeSuccess, "", 5*time.Second)
	e.eventually("exec-bad Unhealthy event", 5*time.Second, func() bool {
		return e.events.find(string(bad.UID) + " spec.containers{app} Warning Unhealthy Readiness probe failed: nope")
	})
	failed := e.waitResult(hang.UID, bus.ProbeLiveness, bus.ProbeFailure, "", 10*time.Second)
	if !strings.Contains(failed.Message, "timed out after 1s") {
		t.Errorf("hang message %q", failed.Message)
	}
	// The readiness worker of a hanging command is not stuck: it asks again.
	e.eventually("repeated exec requests for a hanging command", 10*time.Second, func() bool { return hangs.Load() >= 4 })
	if r, _ := e.last(bad.UID, bus.ProbeReadiness); r.Result != bus.ProbeFailure {
		t.Errorf("exec-bad readiness %v", r.Result)
	}
}

// gRPC health: SERVING is ready, NOT_SERVING is not; the service name is sent.
func TestGRPCProbe(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	hs.SetServingStatus("shop", healthpb.HealthCheckResponse_SERVING)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	svc := "shop"
	rp := &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 1, ProbeHandler: corev1.ProbeHandler{
		GRPC: &corev1.GRPCAction{Port: int32(l.Addr().(*net.TCPAddr).Port), Service: &svc}}}
	pod := newPod("grpc", rp, nil, nil)
	e.publishPods(bus.OpAdd, pod)
	e.publishStatus(running(pod, "sim://g1", time.Now()))
	e.waitResult(pod.UID, bus.ProbeReadiness, bus.ProbeSuccess, "sim://g1", 10*time.Second)
	hs.SetServingStatus("shop", healthpb.HealthCheckResponse_NOT_SERVING)
	e.eventually("NOT_SERVING failure", 10*time.Second, func() bool {
		r, _ := e.last(pod.UID, bus.ProbeReadiness)
		return r.Result == bus.ProbeFailure && strings.Contains(r.Message, "NOT_SERVING")
	})
}

// Bad input: an unknown port name and an unreachable port give failures
// with a message; a TCP probe to a live listener succeeds.
func TestBadInputAndTCP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	named := &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 1, ProbeHandler: corev1.ProbeHandler{
		HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("nope")}}}
	badName := newPod("bad-port-name", nil, named, nil)
	closed := closedPort(t)
	unreach := &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 1, ProbeHandler: corev1.ProbeHandler{
		TCPSocket: &corev1.TCPSocketAction{Port: intOrStr(closed)}}}
	noHost := newPod("unreachable", nil, unreach, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	tcpOK := newPod("tcp-ok", &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
		TCPSocket: &corev1.TCPSocketAction{Port: intOrStr(l.Addr().(*net.TCPAddr).Port), Host: "127.0.0.1"}}}, nil, nil)
	hanging := make(chan struct{})
	slowSrv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hanging:
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { close(hanging) })
	slowProbe := httpProbe(portOf(slowSrv.URL), "/slow")
	slowProbe.FailureThreshold = 1
	slow := newPod("slow", nil, slowProbe, nil)
	e.publishPods(bus.OpAdd, badName, noHost, tcpOK, slow)
	for _, p := range []*corev1.Pod{badName, noHost, tcpOK, slow} {
		e.publishStatus(running(p, "sim://"+p.Name, time.Now()))
	}
	r := e.waitResult(badName.UID, bus.ProbeLiveness, bus.ProbeFailure, "", 5*time.Second)
	if !strings.Contains(r.Message, `port "nope" not found`) {
		t.Errorf("unknown port message %q", r.Message)
	}
	r = e.waitResult(noHost.UID, bus.ProbeLiveness, bus.ProbeFailure, "", 5*time.Second)
	if !strings.Contains(r.Message, "connection refused") {
		t.Errorf("unreachable message %q", r.Message)
	}
	e.waitResult(tcpOK.UID, bus.ProbeReadiness, bus.ProbeSuccess, "", 5*time.Second)
	r = e.waitResult(slow.UID, bus.ProbeLiveness, bus.ProbeFailure, "", 10*time.Second)
	if !strings.Contains(r.Message, "Client.Timeout exceeded") {
		t.Errorf("hanging handler message %q", r.Message)
	}
}

// Deletion: liveness and startup report Success and stop; REMOVE ends the
// pod's workers; a terminal pod's workers end; a SET drops the pods of its
// source and partition that it does not list.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sp := execProbe("false")
	sp.FailureThreshold = 100
	pod := newPod("deleting", httpProbe(closedPort(t), "/"), nil, sp)
	e.onExec(pod.UID, func(*bus.ExecRequest) *bus.ExecResult { return &bus.ExecResult{ExitCode: 1} })
	e.publishPods(bus.OpAdd, pod)
	e.publishStatus(running(pod, "sim://x1", time.Now()))
	e.waitResult(pod.UID, bus.ProbeStartup, bus.ProbeUnknown, "sim://x1", 5*time.Second)
	e.eventually("two workers", 5*time.Second, func() bool { return e.runner.Manager().Workers() == 2 })

	now := metav1.Now()
	deleting := pod.DeepCopy()
	deleting.DeletionTimestamp = &now
	e.publishPods(bus.OpDelete, deleting)
	e.waitResult(pod.UID, bus.ProbeStartup, bus.ProbeSuccess, "sim://x1", 5*time.Second)
	e.eventually("the startup worker ends", 5*time.Second, func() bool { return e.runner.Manager().Workers() == 1 })
	e.publishPods(bus.OpRemove, deleting)
	e.eventually("no workers after REMOVE", 5*time.Second, func() bool { return e.runner.Manager().Workers() == 0 })
	if left := probeTotals(t, e, string(pod.UID)); len(left) != 0 {
		t.Errorf("metric series left after the pod went: %v", left)
	}

	// Terminal: the runtime reports the pod torn down.
	term := newPod("terminal", httpProbe(closedPort(t), "/"), nil, nil)
	e.publishPods(bus.OpAdd, term)
	e.publishStatus(running(term, "sim://t1", time.Now()))
	e.waitResult(term.UID, bus.ProbeReadiness, bus.ProbeFailure, "sim://t1", 5*time.Second)
	done := running(term, "sim://t1", time.Now())
	done.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
	done.Terminated = true
	e.publishStatus(done)
	e.eventually("no workers for a terminated pod", 5*time.Second, func() bool { return e.runner.Manager().Workers() == 0 })

	// SET: a and b share a partition; a SET listing only a drops b.
	a := newPod("set-a", httpProbe(closedPort(t), "/"), nil, nil)
	b := newPod("set-b", httpProbe(closedPort(t), "/"), nil, nil)
	for bus.Partition(string(b.UID), partitions) != bus.Partition(string(a.UID), partitions) {
		b.UID = uuid.NewUUID()
	}
	e.publishPods(bus.OpAdd, a, b)
	e.eventually("two pods' workers", 5*time.Second, func() bool { return e.runner.Manager().Workers() == 2 })
	e.publishPods(bus.OpSet, a)
	e.eventually("b dropped by the SET", 5*time.Second, func() bool { return e.runner.Manager().Workers() == 1 })
	// A SET of another source leaves the api pods alone.
	other := bus.NewPublisher(e.nc, e.js, node, "file")
	if err := other.Publish(t.Context(), e.subjects.PodUpdates(bus.Partition(string(a.UID), partitions)), bus.KindPodUpdate, bus.OpSet, &bus.PodUpdate{Pods: []corev1.Pod{}}); err != nil {
		t.Fatal(err)
	}
	e.publishPods(bus.OpRemove, a)
	e.eventually("a removed", 5*time.Second, func() bool { return e.runner.Manager().Workers() == 0 })
}

// A restarted prober rebuilds its pods and statuses from the streams and
// goes on probing, without flipping a long-running ready container back
// to its initial Failure.
func TestRestartReplaysTheStreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tg := newCountingTarget(t, http.StatusOK)
	pod := newPod("restart", httpProbe(tg.port(), "/"), nil, nil)
	e.publishPods(bus.OpAdd, pod)
	// The container runs since well before either prober started.
	e.publishStatus(running(pod, "sim://old", time.Now().Add(-time.Minute)))
	e.waitResult(pod.UID, bus.ProbeReadiness, bus.ProbeSuccess, "sim://old", 10*time.Second)
	if r := e.resultsOf(pod.UID); r[0].Result != bus.ProbeSuccess {
		t.Errorf("first result %+v, want no initial Failure for a container older than the prober", r[0])
	}

	e.restart()
	e.eventually("the pod's worker again", 10*time.Second, func() bool { return e.runner.Manager().Workers() == 1 })
	h := tg.hits.Load()
	e.eventually("probes after the restart", 10*time.Second, func() bool { return tg.hits.Load() >= h+2 })
	for _, r := range e.resultsOf(pod.UID) {
		if r.Result != bus.ProbeSuccess {
			t.Errorf("result %+v after the restart", r)
		}
	}
}

// With no pod worker answering exec requests (no responders), an exec
// probe's run does not count: liveness stays Success instead of having
// every container restarted once the pod workers come back.
func TestExecWithoutRuntimeDoesNotCount(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.execSub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	lp := execProbe("true")
	lp.FailureThreshold = 1
	pod := newPod("no-runtime", nil, lp, nil)
	e.publishPods(bus.OpAdd, pod)
	e.publishStatus(running(pod, "sim://n1", time.Now()))
	e.waitResult(pod.UID, bus.ProbeLiveness, bus.ProbeSuccess, "sim://n1", 5*time.Second)
	e.eventually("three uncounted runs", 10*time.Second, func() bool {
		return probeTotals(t, e, string(pod.UID))["Liveness/unknown"] >= 3
	})
	for _, r := range e.resultsOf(pod.UID) {
		if r.Result != bus.ProbeSuccess {
			t.Errorf("result %+v without a runtime", r)
		}
	}
	if !e.events.find("Warning Unhealthy Liveness probe errored: no pod worker answers for partition") {
		t.Errorf("no errored event: %v", e.events.all)
	}
}
