package service_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/services/prober/internal/service"
)

const node = "probe-node"

// env is one prober stage on an embedded NATS server, with the test in the
// place of podconfig (pod updates), podworkers (runtime status, exec
// answers) and the result consumers.
type env struct {
	t        *testing.T
	nc       *nats.Conn
	js       jetstream.JetStream
	subjects bus.Subjects
	podPub   *bus.Publisher
	statPub  *bus.Publisher
	runner   *service.Runner
	start    func()
	execSub  *nats.Subscription
	events   *events
	reg      *prometheus.Registry
	// busMetrics is what every runner of the env counts in, across
	// restarts (no registry serves it).
	busMetrics *bus.Metrics

	mu      sync.Mutex
	results map[types.UID][]bus.ProbeResult
	execs   map[types.UID]execFunc
}

// execFunc answers an exec request; nil means no answer at all.
type execFunc func(req *bus.ExecRequest) *bus.ExecResult

const partitions = 4

func newEnv(t *testing.T) *env { return newEnvWith(t, nil) }

// builder makes the runner under test; nil: NewWithDeps with in-memory Events.
type builder func(d service.Deps) (*service.Runner, error)

func newEnvWith(t *testing.T, build builder) *env {
	t.Helper()
	n := testenv.NATSForTest(t)
	nc, js := n.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bus.EnsureStreams(ctx, js, node); err != nil {
		t.Fatal(err)
	}
	e := &env{
		t: t, nc: nc, js: js, subjects: bus.For(node),
		podPub:     bus.NewPublisher(nc, js, node, "api"),
		statPub:    bus.NewPublisher(nc, js, node, "podworkers-test"),
		events:     &events{},
		reg:        prometheus.NewRegistry(),
		busMetrics: func() *bus.Metrics { m, _ := bus.NewMetrics(nil); return m }(),
		results:    map[types.UID][]bus.ProbeResult{},
		execs:      map[types.UID]execFunc{},
	}
	// The result consumer: every ProbeResult on probes.*, by pod.
	sub, err := nc.Subscribe(e.subjects.ProbeResultsAll(), func(m *nats.Msg) {
		env, err := bus.DecodeMsg(m.Header, m.Data)
		if err != nil {
			t.Errorf("undecodable message on %s: %v", m.Subject, err)
			return
		}
		// the stage writes in the node's bus encoding, protobuf by default.
		if env.Encoding != bus.EncodingProtobuf {
			t.Errorf("ProbeResult on %s written as %s, want protobuf", m.Subject, env.Encoding)
		}
		r, err := bus.DecodeProbeResult(env)
		if err != nil {
			t.Errorf("bad ProbeResult on %s: %v", m.Subject, err)
			return
		}
		if want := e.subjects.ProbeResults(bus.Partition(string(r.PodUID), partitions)); m.Subject != want {
			t.Errorf("result for %s on %s, want %s", r.PodUID, m.Subject, want)
		}
		e.mu.Lock()
		e.results[r.PodUID] = append(e.results[r.PodUID], *r)
		e.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	// The runtime's exec responder.
	answer := bus.NewPublisher(nc, js, node, "podworkers-test")
	esub, err := nc.Subscribe(e.subjects.Prefix()+".runtime.probeexec.*", func(m *nats.Msg) {
		env, err := bus.Decode(m.Data)
		if err != nil {
			t.Errorf("bad exec request: %v", err)
			return
		}
		req, err := bus.DecodeExecRequest(env)
		if err != nil {
			t.Errorf("bad exec request: %v", err)
			return
		}
		if want := e.subjects.ProbeExec(bus.Partition(string(req.PodUID), partitions)); m.Subject != want {
			t.Errorf("exec for %s on %s, want %s", req.PodUID, m.Subject, want)
		}
		e.mu.Lock()
		f := e.execs[req.PodUID]
		e.mu.Unlock()
		if f == nil {
			_ = answer.Send(m.Reply, bus.KindExecResult, &bus.ExecResult{Error: "unknown pod"})
			return
		}
		if res := f(req); res != nil {
			_ = answer.Send(m.Reply, bus.KindExecResult, res)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = esub.Unsubscribe() })
	e.execSub = esub

	common := &config.Common{NodeName: node, Partitions: partitions}
	if build == nil {
		build = service.NewWithDeps
	}
	e.start = func() {
		r, err := build(service.Deps{
			Config: &service.Config{Instance: "prober-test", ExecGrace: 300 * time.Millisecond},
			Common: common, Log: zaptest.NewLogger(t), NC: nc, JS: js,
			Recorder: e.events, Registerer: e.reg, Metrics: e.busMetrics,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.stop(r) })
		e.runner = r
		e.eventually("the stage consumes the bus", 10*time.Second, func() bool { return r.Ready(context.Background()) == nil })
	}
	e.start()
	return e
}

func (e *env) stop(r *service.Runner) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Stop(ctx); err != nil {
		e.t.Errorf("stop: %v", err)
	}
}

// restart stops the prober and starts a new one on the same bus (a fresh
// metrics registry, the same durable consumers).
func (e *env) restart() {
	e.stop(e.runner)
	e.reg = prometheus.NewRegistry()
	e.start()
}

// eventually polls cond until it holds or the deadline passes.
func (e *env) eventually(what string, d time.Duration, cond func() bool) {
	e.t.Helper()
	testenv.EventuallyTrue(e.t, d, what, cond)
}

func (e *env) onExec(uid types.UID, f execFunc) {
	e.mu.Lock()
	e.execs[uid] = f
	e.mu.Unlock()
}

func (e *env) resultsOf(uid types.UID) []bus.ProbeResult {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]bus.ProbeResult(nil), e.results[uid]...)
}

// waitResult waits for a result of the pod's probe type with the given
// outcome (and container ID, when not empty) and returns it.
func (e *env) waitResult(uid types.UID, t bus.ProbeType, want bus.ProbeOutcome, containerID string, d time.Duration) bus.ProbeResult {
	e.t.Helper()
	var got bus.ProbeResult
	e.eventually(fmt.Sprintf("%s %s (container %q); have %v", t, want, containerID, e.resultsOf(uid)), d, func() bool {
		for _, r := range e.resultsOf(uid) {
			if r.Probe == t && r.Result == want && (containerID == "" || r.ContainerID == containerID) {
				got = r
				return true
			}
		}
		return false
	})
	return got
}

// last is the newest result of a probe type, if any.
func (e *env) last(uid types.UID, t bus.ProbeType) (bus.ProbeResult, bool) {
	rs := e.resultsOf(uid)
	for i := len(rs) - 1; i >= 0; i-- {
		if rs[i].Probe == t {
			return rs[i], true
		}
	}
	return bus.ProbeResult{}, false
}

func (e *env) publishPods(op bus.Op, pods ...*corev1.Pod) {
	e.t.Helper()
	byPart := map[int][]corev1.Pod{}
	for _, p := range pods {
		part := bus.Partition(string(p.UID), partitions)
		byPart[part] = append(byPart[part], *p)
	}
	for part, ps := range byPart {
		if err := e.podPub.Publish(context.Background(), e.subjects.PodUpdates(part), bus.KindPodUpdate, op, &bus.PodUpdate{Pods: ps}); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) publishStatus(st *bus.PodRuntimeStatus) {
	e.t.Helper()
	part := bus.Partition(string(st.UID), partitions)
	if err := e.statPub.Publish(context.Background(), e.subjects.PodStatus(part), bus.KindPodRuntimeStatus, "", st); err != nil {
		e.t.Fatal(err)
	}
}

// newPod is a pod with one container "app" and the given probes.
func newPod(name string, readiness, liveness, startup *corev1.Probe) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: uuid.NewUUID()},
		Spec: corev1.PodSpec{
			NodeName: node,
			Containers: []corev1.Container{{
				Name: "app", Image: "busybox",
				Ports:          []corev1.ContainerPort{{Name: "web", ContainerPort: 1}},
				ReadinessProbe: readiness, LivenessProbe: liveness, StartupProbe: startup,
			}},
		},
	}
}

// running is the runtime status of the pod with container "app" running
// under the given ID since started.
func running(pod *corev1.Pod, id string, started time.Time) *bus.PodRuntimeStatus {
	return &bus.PodRuntimeStatus{
		UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name, PodIP: "127.0.0.1",
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: "app", ContainerID: id, Image: "busybox",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}},
		}},
	}
}

func httpProbe(port int, path string) *corev1.Probe {
	return &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
		HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intOrStr(port)}}}
}

func execProbe(cmd ...string) *corev1.Probe {
	return &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: cmd}}}
}

// target is an HTTP server whose answer the test sets, counting hits.
type target struct {
	srv    *httptest.Server
	status atomic.Int32
	hits   atomic.Int64
	delay  atomic.Int64 // nanoseconds
	ua     atomic.Value
}

func newTarget(t *testing.T, status int) *target {
	tg := &target{}
	tg.status.Store(int32(status))
	stop := make(chan struct{})
	tg.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tg.hits.Add(1)
		tg.ua.Store(r.Header.Get("User-Agent"))
		if d := time.Duration(tg.delay.Load()); d > 0 {
			select {
			case <-time.After(d):
			case <-stop:
			case <-r.Context().Done():
			}
		}
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "/healthz", http.StatusFound)
			return
		}
		w.WriteHeader(int(tg.status.Load()))
	}))
	t.Cleanup(func() { close(stop); tg.srv.Close() })
	return tg
}

func (tg *target) port() int {
	_, p, _ := net.SplitHostPort(strings.TrimPrefix(tg.srv.URL, "http://"))
	n, _ := strconv.Atoi(p)
	return n
}

// events records Events in memory.
type events struct {
	mu  sync.Mutex
	all []string
}

func (ev *events) Event(obj runtime.Object, eventType, reason, message string) {
	ref, _ := obj.(*corev1.ObjectReference)
	ev.mu.Lock()
	defer ev.mu.Unlock()
	where := ""
	if ref != nil {
		where = string(ref.UID) + " " + ref.FieldPath
	}
	ev.all = append(ev.all, where+" "+eventType+" "+reason+" "+message)
}

func (ev *events) Eventf(obj runtime.Object, eventType, reason, messageFmt string, args ...interface{}) {
	ev.Event(obj, eventType, reason, fmt.Sprintf(messageFmt, args...))
}

func (ev *events) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventType, reason, messageFmt string, args ...interface{}) {
	ev.Eventf(obj, eventType, reason, messageFmt, args...)
}

func (ev *events) find(substr string) bool {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	for _, e := range ev.all {
		if strings.Contains(e, substr) {
			return true
		}
	}
	return false
}
