package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/libs/tracing"
)

// One control plane and one NATS server for the package; each test gets its
// own node name (so its own streams and informer) and namespace.
var (
	controlPlane *testenv.ControlPlane
	natsServer   *testenv.NATS
)

func TestMain(m *testing.M) {
	if testenv.Short() { // no control plane: newHarness skips
		os.Exit(m.Run())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cp, err := testenv.StartControlPlane(ctx, testenv.ControlPlaneOptions{})
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "test control plane: %v\n", err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "statussync-nats-")
	if err != nil {
		cp.Stop()
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ns, err := testenv.StartNATS(dir)
	if err != nil {
		cp.Stop()
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	controlPlane, natsServer = cp, ns
	code := m.Run()
	ns.Stop()
	_ = os.RemoveAll(dir)
	cp.Stop()
	os.Exit(code)
}

// requestCounter counts the API requests of the stage's client by method
// and path.
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		c.mu.Lock()
		c.counts[req.Method+" "+req.URL.Path]++
		c.mu.Unlock()
		return rt.RoundTrip(req)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// statusPatches is how many status patches of the pod the stage sent.
func (c *requestCounter) statusPatches(ns, name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[fmt.Sprintf("PATCH /api/v1/namespaces/%s/pods/%s/status", ns, name)]
}

// allStatusPatches counts every status patch.
func (c *requestCounter) allStatusPatches() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, v := range c.counts {
		if strings.HasPrefix(k, "PATCH ") && strings.HasSuffix(k, "/status") {
			n += v
		}
	}
	return n
}

type harness struct {
	t          testing.TB
	ctx        context.Context
	node       string
	ns         string
	partitions int
	cs         kubernetes.Interface // the test's own admin client
	js         jetstream.JetStream
	nc         *nats.Conn
	runner     *Runner
	kc         kubernetes.Interface // the stage's client, counted
	requests   *requestCounter
	podconfig  *bus.Publisher
	workers    *bus.Publisher
	prober     *bus.Publisher
}

type harnessOptions struct {
	batchPeriod   time.Duration
	coalesceDelay time.Duration
	// replayWindow: 0 is the default (2m), negative disables the replay.
	replayWindow time.Duration
	crash        bool
	log          *zap.Logger
	// registry takes the stage's metrics (default: a registry of its own).
	registry *prometheus.Registry
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func newHarness(t testing.TB, o harnessOptions) *harness {
	t.Helper()
	testenv.SkipShort(t, "etcd and kube-apiserver")
	if o.batchPeriod == 0 {
		o.batchPeriod = 10 * time.Second
	}
	if o.coalesceDelay == 0 {
		o.coalesceDelay = 50 * time.Millisecond
	}
	if o.log == nil {
		o.log = zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	suffix := randomSuffix()
	h := &harness{t: t, ctx: ctx, node: "node-" + suffix, ns: "ns-" + suffix, partitions: 4, cs: controlPlane.Clientset()}
	_, err := h.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: h.ns}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(natsServer.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	h.nc, h.js = nc, js
	if err := bus.EnsureStreams(ctx, js, h.node); err != nil {
		t.Fatal(err)
	}
	h.requests = &requestCounter{counts: map[string]int{}}
	cfg := rest.CopyConfig(controlPlane.Config)
	cfg.QPS, cfg.Burst = 50, 100
	cfg.WrapTransport = h.requests.wrap
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.kc = kc
	h.runner = h.startRunner(o)
	h.podconfig = bus.NewPublisher(nc, js, h.node, "api")
	h.workers = bus.NewPublisher(nc, js, h.node, "podworkers-test")
	h.prober = bus.NewPublisher(nc, js, h.node, "prober-test")
	return h
}

// startRunner starts a statussync stage for the harness's node; it is
// stopped when the test ends.
func (h *harness) startRunner(o harnessOptions) *Runner {
	h.t.Helper()
	switch {
	case o.replayWindow == 0:
		o.replayWindow = 2 * time.Minute
	case o.replayWindow < 0:
		o.replayWindow = 0
	}
	if o.batchPeriod == 0 {
		o.batchPeriod = 10 * time.Second
	}
	if o.coalesceDelay == 0 {
		o.coalesceDelay = 50 * time.Millisecond
	}
	if o.log == nil {
		o.log = zaptest.NewLogger(h.t, zaptest.Level(zap.InfoLevel))
	}
	if o.registry == nil {
		o.registry = prometheus.NewRegistry()
	}
	common := &config.Common{NodeName: h.node, Partitions: h.partitions}
	r, err := New(&Config{Workers: 4, BatchPeriod: o.batchPeriod, CoalesceDelay: o.coalesceDelay, PendingTTL: time.Minute, ReplayWindow: o.replayWindow},
		common, o.log, h.kc, kube.NewNodePods(h.kc, h.node), h.js, o.registry, nil, tracing.Noop())
	if err != nil {
		h.t.Fatal(err)
	}
	r.crash = o.crash
	if err := r.Start(h.ctx); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := r.Stop(sctx); err != nil {
			h.t.Errorf("stop: %v", err)
		}
	})
	h.eventually("stage ready", func() error { return r.Ready(h.ctx) })
	return r
}

// eventually polls check until it returns nil or the deadline passes.
func (h *harness) eventually(what string, check func() error) {
	h.t.Helper()
	testenv.EventuallyNoError(h.t, 30*time.Second, what, check)
}

func (h *harness) partition(uid types.UID) int { return bus.Partition(string(uid), h.partitions) }

// createPod creates a pod bound to the node in the API server and publishes
// it as podconfig would.
func (h *harness) createPod(name string, mutate func(*corev1.Pod)) *corev1.Pod {
	h.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns},
		Spec: corev1.PodSpec{
			NodeName:      h.node,
			RestartPolicy: corev1.RestartPolicyAlways,
			Containers:    []corev1.Container{{Name: "app", Image: "busybox"}},
		},
	}
	if mutate != nil {
		mutate(p)
	}
	created, err := h.cs.CoreV1().Pods(h.ns).Create(h.ctx, p, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	h.publishPods(bus.OpAdd, "api", created)
	return created
}

func (h *harness) publishPods(op bus.Op, source string, pods ...*corev1.Pod) {
	h.t.Helper()
	pub := h.podconfig
	if source != "api" {
		pub = bus.NewPublisher(h.nc, h.js, h.node, source)
	}
	for _, p := range pods {
		err := pub.Publish(h.ctx, bus.For(h.node).PodUpdates(h.partition(p.UID)), bus.KindPodUpdate, op, &bus.PodUpdate{Pods: []corev1.Pod{*p}})
		if err != nil {
			h.t.Fatal(err)
		}
	}
}

func (h *harness) publishStatus(rs *bus.PodRuntimeStatus) {
	h.t.Helper()
	if err := h.workers.Publish(h.ctx, bus.For(h.node).PodStatus(h.partition(rs.UID)), bus.KindPodRuntimeStatus, "", rs); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) publishProbe(p *corev1.Pod, container, id string, probe bus.ProbeType, result bus.ProbeOutcome) {
	h.t.Helper()
	pr := &bus.ProbeResult{PodUID: p.UID, Namespace: p.Namespace, Name: p.Name, Container: container, ContainerID: id, Probe: probe, Result: result}
	if err := h.prober.Publish(h.ctx, bus.For(h.node).ProbeResults(h.partition(p.UID)), bus.KindProbeResult, "", pr); err != nil {
		h.t.Fatal(err)
	}
}

// waitPod polls the API pod until check passes.
func (h *harness) waitPod(name, what string, check func(*corev1.Pod) error) *corev1.Pod {
	h.t.Helper()
	var got *corev1.Pod
	h.eventually(name+": "+what, func() error {
		p, err := h.cs.CoreV1().Pods(h.ns).Get(h.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		got = p
		return check(p)
	})
	return got
}

func (h *harness) waitGone(name string) {
	h.t.Helper()
	h.eventually(name+" deleted", func() error {
		_, err := h.cs.CoreV1().Pods(h.ns).Get(h.ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("still there")
	})
}

// runtime status builders, as the pod workers would publish them.

func runtimeStatus(p *corev1.Pod, containers ...corev1.ContainerStatus) *bus.PodRuntimeStatus {
	return &bus.PodRuntimeStatus{UID: p.UID, Namespace: p.Namespace, Name: p.Name, HostIP: "127.0.0.1", ContainerStatuses: containers}
}

func waitingC(name string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, Image: "busybox", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
}

func runningC(name, id string, restarts int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, Image: "busybox", ImageID: "sim://busybox", ContainerID: id, RestartCount: restarts,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}
}

func terminatedC(name, id string, code int32) corev1.ContainerStatus {
	now := metav1.Now()
	return corev1.ContainerStatus{Name: name, Image: "busybox", ImageID: "sim://busybox", ContainerID: id,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, StartedAt: now, FinishedAt: now, ContainerID: id}}}
}

func condition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func wantCondition(p *corev1.Pod, t corev1.PodConditionType, s corev1.ConditionStatus) error {
	c := condition(p, t)
	if c == nil {
		return fmt.Errorf("no %s condition", t)
	}
	if c.Status != s {
		return fmt.Errorf("%s is %s (%s: %s), want %s", t, c.Status, c.Reason, c.Message, s)
	}
	return nil
}

func wantPhase(p *corev1.Pod, phase corev1.PodPhase) error {
	if p.Status.Phase != phase {
		return fmt.Errorf("phase %s, want %s", p.Status.Phase, phase)
	}
	return nil
}

func typesUID(s string) types.UID { return types.UID(s) }
