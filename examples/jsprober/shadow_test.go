package jsprober_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/splitlet/splitlet/examples/tcpprober"
	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/bus/bustest"
	"github.com/splitlet/splitlet/libs/conformance"
	"github.com/splitlet/splitlet/libs/testenv"
)

// TestShadowConformance: jsprober with --shadow, as the prober's shadow
// identity, answers as splitlet-shadow-prober and passes the kit's shadow
// cases without a permission violation.
func TestShadowConformance(t *testing.T) {
	const node = "jsprober-shadow"
	n := bustest.Start(t, node)
	id := bus.ShadowIdentity(bus.StageProber)
	startJSProber(t, "--nats-url="+n.URL, "--nats-nkey="+n.Seed(id), "--node-name="+node, "--partitions=4", "--shadow")
	st := waitReadyAs(t, n.Connect(t, bus.AdminIdentity), node, id)
	if st.Stage != id || st.Implementation != "jsprober" {
		t.Errorf("StageStatus %+v: want stage %s, implementation jsprober", st, id)
	}
	conformance.ProberShadow(t, conformance.Target{NATSURL: n.URL, NATSOptions: n.Options(t, bus.AdminIdentity), Node: node, Partitions: 4, JSONOnly: true})
	if v := n.Violations.All(); len(v) > 0 {
		t.Errorf("permission violations:\n%s", strings.Join(v, "\n"))
	}
}

// TestShadowKilled: kill -9 of a shadow (jsprober) beside the live prober
// (tcpprober): the live node sees nothing of it. Live results keep
// following the probed port, and every live result is the live prober's.
func TestShadowKilled(t *testing.T) {
	const node = "shadow-killed"
	n := bustest.Start(t, node)
	apptest.Start(t, "tcpprober", []string{"--nats-url=" + n.URL, "--nats-nkey=" + n.Seed(bus.StageProber), "--node-name=" + node, "--partitions=4"}, tcpprober.Service())
	shadow := startJSProber(t, "--nats-url="+n.URL, "--nats-nkey="+n.Seed(bus.ShadowIdentity(bus.StageProber)), "--node-name="+node, "--partitions=4", "--shadow")
	k := newKit(t, n, node)
	waitReadyAs(t, k.nc, node, bus.ShadowIdentity(bus.StageProber))
	pod, port := k.probedPod(t, "killed")
	k.live.wait(t, pod.UID, bus.ProbeSuccess, "tcpprober")
	k.shadow.wait(t, pod.UID, bus.ProbeSuccess, "jsprober")

	shadow.kill9(t)
	port.close()
	k.live.wait(t, pod.UID, bus.ProbeFailure, "tcpprober")
	port.open(t)
	k.live.wait(t, pod.UID, bus.ProbeSuccess, "tcpprober")
	for _, m := range k.live.all() {
		if m.Source != "tcpprober" {
			t.Errorf("a live ProbeResult from %q: only the live prober publishes there", m.Source)
		}
	}
	if v := n.Violations.All(); len(v) > 0 {
		t.Errorf("permission violations:\n%s", strings.Join(v, "\n"))
	}
}

// TestShadowNoTakeover: kill -9 of the live prober (jsprober) beside its
// shadow (tcpprober --shadow): the shadow does not take over. No live
// result follows the port any more, and the live durable's messages wait
// for the live prober, untaken, while the shadow goes on under its prefix.
func TestShadowNoTakeover(t *testing.T) {
	const node = "shadow-takeover"
	n := bustest.Start(t, node)
	live := startJSProber(t, "--nats-url="+n.URL, "--nats-nkey="+n.Seed(bus.StageProber), "--node-name="+node, "--partitions=4")
	apptest.Start(t, "tcpprober", []string{"--nats-url=" + n.URL, "--nats-nkey=" + n.Seed(bus.ShadowIdentity(bus.StageProber)),
		"--node-name=" + node, "--partitions=4", "--shadow"}, tcpprober.Service())
	k := newKit(t, n, node)
	waitReadyAs(t, k.nc, node, "prober")
	pod, port := k.probedPod(t, "takeover")
	k.live.wait(t, pod.UID, bus.ProbeSuccess, "jsprober")
	k.shadow.wait(t, pod.UID, bus.ProbeSuccess, "tcpprober")

	live.kill9(t)
	from := k.live.count()
	port.close()
	k.shadow.wait(t, pod.UID, bus.ProbeFailure, "tcpprober")
	pod2, _ := k.probedPod(t, "after")
	k.shadow.wait(t, pod2.UID, bus.ProbeSuccess, "tcpprober")
	if got := k.live.all()[from:]; len(got) > 0 {
		t.Errorf("live ProbeResults after the live prober was killed: %+v", got)
	}
	// the new pod's update waits in the live durable, for the live prober.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := k.js.Consumer(ctx, bus.StreamName(node, bus.StreamPodUpdates), bus.DurableProberPodUpdates)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending+uint64(info.NumAckPending) == 0 {
		t.Errorf("the live durable %s has nothing pending after the live prober died: someone took its messages (%+v)", bus.DurableProberPodUpdates, info)
	}
	if v := n.Violations.All(); len(v) > 0 {
		t.Errorf("permission violations:\n%s", strings.Join(v, "\n"))
	}
}

// kit plays podconfig and the pod workers (as admin) and watches the live
// and shadow probe results.
type kit struct {
	node         string
	nc           *nats.Conn
	js           jetstream.JetStream
	pub          *bus.Publisher
	live, shadow *resultWatch
}

func newKit(t *testing.T, n *bustest.Server, node string) *kit {
	nc := n.Connect(t, bus.AdminIdentity)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s := bus.For(node)
	return &kit{node: node, nc: nc, js: js, pub: bus.NewPublisher(nc, js, node, "api", bus.WithEncoding(bus.EncodingJSON)),
		live: watchResults(t, nc, s.ProbeResultsAll()), shadow: watchResults(t, nc, s.Shadow(bus.StageProber).ProbeResultsAll())}
}

// probedPod publishes a running pod whose readiness probe is a TCP connect
// to a port the test listens on.
func (k *kit) probedPod(t *testing.T, name string) (*corev1.Pod, *port) {
	t.Helper()
	p := &port{}
	p.open(t)
	uid := types.UID(fmt.Sprintf("%s-%d", name, time.Now().UnixNano()))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: uid, ResourceVersion: "1"},
		Spec: corev1.PodSpec{NodeName: k.node, Containers: []corev1.Container{{Name: "app", Image: "busybox",
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(p.port))}},
				PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1}}}},
	}
	part := bus.Partition(string(uid), 4)
	now := metav1.Now()
	st := &bus.PodRuntimeStatus{UID: uid, Namespace: "default", Name: name, PodIP: "127.0.0.1", HostIP: "127.0.0.1", StartTime: &now,
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", ContainerID: "sim://" + string(uid), Image: "busybox",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := k.pub.Publish(ctx, bus.For(k.node).PodUpdates(part), bus.KindPodUpdate, bus.OpAdd, &bus.PodUpdate{Pods: []corev1.Pod{*pod}}); err != nil {
		t.Fatal(err)
	}
	if err := k.pub.Publish(ctx, bus.For(k.node).PodStatus(part), bus.KindPodRuntimeStatus, "", st); err != nil {
		t.Fatal(err)
	}
	return pod, p
}

// port is a TCP port the test opens and closes.
type port struct {
	port int
	l    net.Listener
}

func (p *port) open(t *testing.T) {
	t.Helper()
	var l net.Listener
	// the port may still be being released: a bounded retry.
	testenv.EventuallyNoError(t, 5*time.Second, fmt.Sprintf("listen again on %d", p.port), func() (err error) {
		l, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p.port))
		return err
	})
	p.l, p.port = l, l.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = l.Close() })
}

func (p *port) close() { _ = p.l.Close() }

// result is a ProbeResult seen on a subject, with its source.
type result struct {
	Source string
	bus.ProbeResult
}

// resultWatch records the ProbeResults on a subject.
type resultWatch struct {
	subject string
	mu      sync.Mutex
	got     []result
	changed chan struct{}
}

func watchResults(t *testing.T, nc *nats.Conn, subject string) *resultWatch {
	w := &resultWatch{subject: subject, changed: make(chan struct{})}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		e, err := bus.DecodeMsg(m.Header, m.Data)
		if err != nil {
			return
		}
		r, err := bus.DecodeProbeResult(e)
		if err != nil {
			return
		}
		w.mu.Lock()
		w.got = append(w.got, result{e.Source, *r})
		close(w.changed)
		w.changed = make(chan struct{})
		w.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return w
}

func (w *resultWatch) all() []result {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]result(nil), w.got...)
}

func (w *resultWatch) count() int { return len(w.all()) }

// wait waits for the pod's latest readiness result on the subject to be
// outcome, from source.
func (w *resultWatch) wait(t *testing.T, uid types.UID, outcome bus.ProbeOutcome, source string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		w.mu.Lock()
		var last *result
		for i := range w.got {
			if w.got[i].PodUID == uid && w.got[i].Probe == bus.ProbeReadiness {
				last = &w.got[i]
			}
		}
		done := last != nil && last.Result == outcome && last.Source == source
		next := w.changed
		w.mu.Unlock()
		if done {
			return
		}
		select {
		case <-next:
		case <-deadline:
			t.Fatalf("no readiness %s for %s from %s on %s within 20 s (saw %+v)", outcome, uid, source, w.subject, w.all())
		}
	}
}
