package service

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
)

// cp is one control plane shared by the package's tests; each test uses its
// own node name, so they do not see each other's pods.
var cp *testenv.ControlPlane

func TestMain(m *testing.M) {
	if testenv.Short() { // no control plane: newEnv skips
		os.Exit(m.Run())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	var err error
	cp, err = testenv.StartControlPlane(ctx, testenv.ControlPlaneOptions{})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "control plane:", err)
		os.Exit(1)
	}
	code := m.Run()
	cp.Stop()
	os.Exit(code)
}

const partitions = 4

type env struct {
	t    *testing.T
	node string
	cs   kubernetes.Interface
	nats *testenv.NATS
	nc   *nats.Conn
	js   jetstream.JetStream
	bus  *busLog
	// logs holds every line the runner logged, as JSON.
	logs apptest.Buffer
}

func newEnv(t *testing.T, node string, registerNode bool) *env {
	t.Helper()
	testenv.SkipShort(t, "etcd and kube-apiserver")
	n := testenv.NATSForTest(t)
	nc, js := n.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bus.EnsureStreams(ctx, js, node); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, node: node, cs: cp.Clientset(), nats: n, nc: nc, js: js}
	if registerNode {
		e.registerNode()
	}
	e.bus = watchBus(t, js, node)
	return e
}

func (e *env) registerNode() {
	e.t.Helper()
	_, err := e.cs.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: e.node}}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
}

// testConfig is the default configuration with fast periods.
func testConfig() *Config {
	c := Defaults()
	c.SnapshotPeriod = time.Hour
	c.FileCheckFrequency = 500 * time.Millisecond
	c.HTTPCheckFrequency = 200 * time.Millisecond
	c.MirrorResync = 500 * time.Millisecond
	return c
}

func (e *env) start(cfg *Config) *Runner {
	e.t.Helper()
	toBuffer := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&e.logs), zap.DebugLevel)
	log := zaptest.NewLogger(e.t, zaptest.Level(zap.InfoLevel), zaptest.WrapOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewTee(c, toBuffer)
	})))
	r, err := Build(cfg, e.node, partitions, log, e.cs, nil, e.nc, e.js, nil, nil, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = r.Stop(context.Background()) })
	return r
}

// busRecord is one PodUpdate seen on the bus.
type busRecord struct {
	Subject string
	Source  string
	Op      bus.Op
	Seq     uint64
	Pods    []corev1.Pod
}

// busLog collects every PodUpdate of a node from the stream, in order.
type busLog struct {
	mu   sync.Mutex
	recs []busRecord
	errs []error
}

func watchBus(t *testing.T, js jetstream.JetStream, node string) *busLog {
	t.Helper()
	ctx := context.Background()
	b := &busLog{}
	cons, err := js.OrderedConsumer(ctx, bus.StreamName(node, bus.StreamPodUpdates), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		env, err := bus.Decode(m.Data())
		var pu *bus.PodUpdate
		if err == nil {
			pu, err = bus.DecodePodUpdate(env)
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if err != nil {
			b.errs = append(b.errs, fmt.Errorf("%s: %w", m.Subject(), err))
			return
		}
		b.recs = append(b.recs, busRecord{Subject: m.Subject(), Source: env.Source, Op: env.Op, Seq: env.Seq, Pods: pu.Pods})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, err := range b.errs {
			t.Errorf("bad message on the bus: %v", err)
		}
	})
	return b
}

func (b *busLog) snapshot() []busRecord {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]busRecord(nil), b.recs...)
}

// ops lists the operations (SET left out) that carried the pod, in order.
func (b *busLog) ops(uid types.UID) []string {
	var out []string
	for _, r := range b.snapshot() {
		if r.Op == bus.OpSet {
			continue
		}
		for _, p := range r.Pods {
			if p.UID == uid {
				out = append(out, string(r.Op))
			}
		}
	}
	return out
}

// last returns the last copy of the pod carried by the given op.
func (b *busLog) last(uid types.UID, op bus.Op) (corev1.Pod, busRecord, bool) {
	recs := b.snapshot()
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Op != op {
			continue
		}
		for _, p := range recs[i].Pods {
			if p.UID == uid {
				return p, recs[i], true
			}
		}
	}
	return corev1.Pod{}, busRecord{}, false
}

func (e *env) sourcesReady() *bus.SourcesReady {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := e.js.Stream(ctx, bus.StreamName(e.node, bus.StreamState))
	if err != nil {
		return nil
	}
	m, err := s.GetLastMsgForSubject(ctx, bus.For(e.node).SourcesReady())
	if err != nil {
		return nil
	}
	env, err := bus.Decode(m.Data)
	if err != nil {
		e.t.Fatalf("SourcesReady: %v", err)
	}
	sr, err := bus.DecodeSourcesReady(env)
	if err != nil {
		e.t.Fatalf("SourcesReady: %v", err)
	}
	return sr
}

// staticPods is the last StaticPods on state.static, nil when there is none.
func (e *env) staticPods() *bus.StaticPods {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := e.js.Stream(ctx, bus.StreamName(e.node, bus.StreamState))
	if err != nil {
		return nil
	}
	m, err := s.GetLastMsgForSubject(ctx, bus.For(e.node).StaticPods())
	if err != nil {
		return nil
	}
	env, err := bus.Decode(m.Data)
	if err != nil {
		e.t.Fatalf("StaticPods: %v", err)
	}
	sp, err := bus.DecodeStaticPods(env)
	if err != nil {
		e.t.Fatalf("StaticPods: %v", err)
	}
	return sp
}

// staticPodsAre says whether the last StaticPods lists exactly want
// ("uid namespace/name", in any order).
func (e *env) staticPodsAre(want ...string) bool {
	sp := e.staticPods()
	if sp == nil || len(sp.Pods) != len(want) {
		return false
	}
	for _, p := range sp.Pods {
		if !slices.Contains(want, fmt.Sprintf("%s %s/%s", p.UID, p.Namespace, p.Name)) {
			return false
		}
	}
	return true
}

func (e *env) waitAllReady() {
	e.t.Helper()
	testenv.EventuallyTrue(e.t, 20*time.Second, "SourcesReady allReady", func() bool {
		sr := e.sourcesReady()
		return sr != nil && sr.AllReady
	})
}

func testPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}},
	}
}

func eqOps(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: ops %v, want %v", what, got, want)
	}
}
