package service

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/messaging"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/sim"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/libs/tracing"
)

var (
	cpOnce sync.Once
	cp     *testenv.ControlPlane
	cpErr  error
)

// controlPlane is shared by the package's tests (one start, ~3 s).
func controlPlane(t *testing.T) *testenv.ControlPlane {
	t.Helper()
	testenv.SkipShort(t, "etcd and kube-apiserver")
	cpOnce.Do(func() { cp, cpErr = testenv.StartControlPlane(context.Background(), testenv.ControlPlaneOptions{}) })
	if cpErr != nil {
		t.Fatalf("control plane: %v", cpErr)
	}
	return cp
}

func TestMain(m *testing.M) {
	if node := os.Getenv(shadowChildNode); node != "" {
		os.Exit(runShadowChild(node))
	}
	code := m.Run()
	if cp != nil {
		cp.Stop()
	}
	os.Exit(code)
}

const partitions = 4

// env is one test's bus, API server and pod status view.
type env struct {
	t    *testing.T
	node string
	nats *testenv.NATS
	cs   kubernetes.Interface
	pub  *bus.Publisher
	// busMetrics is what the env's replicas count in (tests read it).
	busMetrics *bus.Metrics

	mu     sync.Mutex
	status map[types.UID]*bus.PodRuntimeStatus
	source map[types.UID]string
	seen   []*bus.PodRuntimeStatus
	// seenFrom[i] is the source of seen[i].
	seenFrom []string
	// natsReplicas is the replicas' nats-replicas (0: 1).
	natsReplicas int
	// podDefaults, if set, shapes every pod busPod makes (a runtime's
	// needs); onTrack is told of the pods a test runs (to clean them up).
	podDefaults func(*corev1.Pod)
	onTrack     func(...*corev1.Pod)
	// replicaCS, if set, is the replicas' clientset (default: admin).
	replicaCS kubernetes.Interface
	// logSink, if set, also gets every replica's log, at debug level.
	logSink zapcore.WriteSyncer
	// uids is the replicas' podworkers.process-uid-dir: shared by them
	// as by the replicas of a host.
	uids string
	// cgroupRoot, if set, is the replicas' cgroup-root (a test's own, so
	// that tests and agents on the host share no kubepods).
	cgroupRoot string
}

// track names pods the test runs, for the runtime's cleanup.
func (e *env) track(pods ...*corev1.Pod) {
	if e.onTrack != nil {
		e.onTrack(pods...)
	}
}

func newEnv(t *testing.T, node string) *env {
	return newEnvOn(t, node, testenv.NATSForTest(t))
}

// newEnvOn is newEnv on a given NATS server.
func newEnvOn(t *testing.T, node string, n *testenv.NATS) *env {
	c := controlPlane(t)
	nc, js := n.Connect(t)
	ctx := context.Background()
	if err := bus.EnsureStreams(ctx, js, node); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, node: node, nats: n, cs: c.Clientset(), pub: bus.NewPublisher(nc, js, node, "api"), uids: filepath.Join(t.TempDir(), "uids"),
		busMetrics: mustBusMetrics(t), status: map[types.UID]*bus.PodRuntimeStatus{}, source: map[types.UID]string{}}
	cons, err := js.OrderedConsumer(ctx, bus.StreamName(node, bus.StreamPodStatus), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		env, err := bus.Decode(m.Data())
		if err != nil {
			t.Errorf("bad status message: %v", err)
			return
		}
		st, err := bus.DecodePodRuntimeStatus(env)
		if err != nil {
			t.Errorf("bad status payload: %v", err)
			return
		}
		e.mu.Lock()
		e.status[st.UID] = st
		e.source[st.UID] = env.Source
		e.seen = append(e.seen, st)
		e.seenFrom = append(e.seenFrom, env.Source)
		e.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	e.publish(bus.For(node).SourcesReady(), bus.KindSourcesReady, "", &bus.SourcesReady{Sources: []string{"api"}, Ready: []string{"api"}, AllReady: true})
	return e
}

func (e *env) publish(subject string, kind bus.Kind, op bus.Op, payload any) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// retried as a stage retries: a stream may be electing a leader.
	for {
		err := e.pub.Publish(ctx, subject, kind, op, payload)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			e.t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (e *env) send(op bus.Op, pods ...*corev1.Pod) {
	e.t.Helper()
	byPart := map[int][]corev1.Pod{}
	for _, p := range pods {
		part := bus.Partition(string(p.UID), partitions)
		byPart[part] = append(byPart[part], *p)
	}
	for part, list := range byPart {
		// as podconfig does: a RECONCILE on the partition's reconcile
		// subject.
		subject := bus.For(e.node).PodUpdates(part)
		if op == bus.OpReconcile {
			subject = bus.For(e.node).PodReconciles(part)
		}
		e.publish(subject, bus.KindPodUpdate, op, &bus.PodUpdate{Pods: list})
	}
}

func (e *env) get(uid types.UID) (*bus.PodRuntimeStatus, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.status[uid], e.source[uid]
}

// sawWaiting says whether any status sent for the pod had its one
// container waiting with reason: a transient reason (ErrImagePull, which
// the next sync turns into ImagePullBackOff) may stand for less than a
// poll's interval, so the last status alone would miss it.
func (e *env) sawWaiting(uid types.UID, reason string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, st := range e.seen {
		if st.UID == uid && len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Waiting != nil &&
			st.ContainerStatuses[0].State.Waiting.Reason == reason {
			return true
		}
	}
	return false
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.EventuallyTrue(t, timeout, what, cond)
}

func defaults(t *testing.T) *Config {
	cfg := &Config{}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	cfg.Housekeeping = 200 * time.Millisecond
	cfg.ContainerBackOff = 200 * time.Millisecond
	cfg.ContainerBackOffMax = 10 * time.Second
	cfg.BackOffPeriod = 200 * time.Millisecond
	return cfg
}

// startReplica runs one podworkers replica with its own NATS connection.
func (e *env) startReplica(t *testing.T, runtimeName string, mod func(*Config)) *Runner {
	t.Helper()
	r, _ := e.startReplicaConn(t, runtimeName, mod)
	return r
}

func (e *env) startReplicaConn(t *testing.T, runtimeName string, mod func(*Config)) (*Runner, *messaging.Conn) {
	t.Helper()
	return e.startReplicaRuntime(t, runtimeName, mod, nil)
}

// startReplicaRuntime runs a replica; rt, if set, is its runtime.
func (e *env) startReplicaRuntime(t *testing.T, runtimeName string, mod func(*Config), rt runtime.Runtime) (*Runner, *messaging.Conn) {
	t.Helper()
	cfg := defaults(t)
	cfg.ProcessUIDDir = e.uids
	if e.cgroupRoot != "" {
		cfg.Cgroups.Root = e.cgroupRoot
	}
	if mod != nil {
		mod(cfg)
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	if e.logSink != nil {
		sink := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), e.logSink, zap.DebugLevel)
		log = zap.New(zapcore.NewTee(log.Core(), sink))
	}
	dataDir := testenv.DataDir(t)
	testenv.OpenWay(t, dataDir)
	common := &config.Common{NodeName: e.node, Partitions: partitions, Runtime: runtimeName, DataDir: dataDir, CRIEndpoint: criEndpoint,
		NATSURL: e.nats.URL, NATSReplicas: max(e.natsReplicas, 1)}
	conn, err := messaging.Connect(messaging.Options{URL: e.nats.URL, Node: e.node, Name: "podworkers-test", Log: log, Replicas: e.natsReplicas})
	if err != nil {
		t.Fatal(err)
	}
	cs := controlPlane(t).Clientset()
	if e.replicaCS != nil {
		cs = e.replicaCS
	}
	r, err := New(cfg, common, log, conn, conn.JS, cs, prometheus.NewRegistry(), e.busMetrics, tracing.Noop())
	if err != nil {
		t.Fatal(err)
	}
	r.Runtime = rt
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
		_ = conn.Close(context.Background())
	})
	return r, conn
}

func stopReplica(t *testing.T, r *Runner) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

func newPod(t *testing.T, cs kubernetes.Interface, name string, mod func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	grace := int64(1)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: "n", TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "app", Image: "busybox", Command: []string{"sleep", "3600"}}}},
	}
	if mod != nil {
		mod(p)
	}
	created, err := cs.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

func containerRunning(st *bus.PodRuntimeStatus) bool {
	return st != nil && len(st.ContainerStatuses) > 0 && st.ContainerStatuses[0].State.Running != nil
}

func markDeleted(p *corev1.Pod) *corev1.Pod {
	d := p.DeepCopy()
	now := metav1.Now()
	d.DeletionTimestamp = &now
	g := int64(1)
	d.DeletionGracePeriodSeconds = &g
	return d
}

func TestPodRunsAndIsTornDown(t *testing.T) {
	e := newEnv(t, "pw-life")
	r := e.startReplica(t, config.RuntimeSim, nil)
	cs := e.cs
	a := newPod(t, cs, "life-a", func(p *corev1.Pod) { p.Spec.NodeName = e.node })
	b := newPod(t, cs, "life-b", func(p *corev1.Pod) { p.Spec.NodeName = e.node })
	e.send(bus.OpAdd, a, b)
	eventually(t, 30*time.Second, "both pods running", func() bool {
		sa, _ := e.get(a.UID)
		sb, _ := e.get(b.UID)
		return containerRunning(sa) && containerRunning(sb)
	})
	sa, src := e.get(a.UID)
	if sa.PodIP == "" || sa.StartTime == nil || sa.Terminated || len(src) < len("podworkers-") {
		t.Fatalf("status %+v from %q", sa, src)
	}
	e.checkRuntimeRequests(t, a)
	part := bus.Partition(string(a.UID), partitions)
	e.checkReconcilesInOrder(t, r, a, part)
	// a liveness failure of the current container kills and restarts it.
	first := sa.ContainerStatuses[0].ContainerID
	e.publish(bus.For(e.node).ProbeResults(part), bus.KindProbeResult, "", &bus.ProbeResult{PodUID: a.UID, Namespace: a.Namespace, Name: a.Name,
		Container: "app", ContainerID: first, Probe: bus.ProbeLiveness, Result: bus.ProbeFailure, Message: "probe failed"})
	eventually(t, 30*time.Second, "container restarted after the liveness failure", func() bool {
		st, _ := e.get(a.UID)
		c := st.ContainerStatuses[0]
		return c.ContainerID != first && c.RestartCount == 1 && c.State.Running != nil &&
			c.LastTerminationState.Terminated != nil && c.LastTerminationState.Terminated.ContainerID == first
	})
	// graceful DELETE, then REMOVE of the other.
	e.send(bus.OpDelete, markDeleted(a))
	e.send(bus.OpRemove, b)
	eventually(t, 30*time.Second, "both pods terminated", func() bool {
		sa, _ := e.get(a.UID)
		sb, _ := e.get(b.UID)
		return sa.Terminated && sb.Terminated
	})
	sa, _ = e.get(a.UID)
	if sa.ContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("terminated pod's container: %+v", sa.ContainerStatuses[0].State)
	}
}

// checkReconcilesInOrder: the RECONCILEs of a running pod (on their own
// subject) reach the owner of its partition, in publish
// order with the pod's UPDATEs: once the partition's follower has handled
// the last message sent, the pod the controller holds is that
// message's, whichever of the two subjects it came on.
func (e *env) checkReconcilesInOrder(t *testing.T, r *Runner, p *corev1.Pod, part int) {
	t.Helper()
	stamp := func(step, message string) *corev1.Pod {
		q := p.DeepCopy()
		q.Labels = map[string]string{"step": step}
		// a status field podworkers keeps (busPodView) marks the reconcile.
		q.Status.QOSClass = corev1.PodQOSClass(message)
		return q
	}
	held := func() *corev1.Pod {
		q, _ := r.Controller().Pod(p.UID)
		return q
	}
	settled := func(what, step, message string) {
		t.Helper()
		ctx := context.Background()
		stream := bus.StreamName(e.node, bus.StreamPodUpdates)
		// the stream's last message is the test's last: the partition's
		// follower has handled it once every message is applied.
		st, err := r.conn.JS.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		last := st.CachedInfo().State.LastSeq
		eventually(t, 15*time.Second, what, func() bool {
			r.mu.Lock()
			pt := r.parts[part]
			r.mu.Unlock()
			return pt != nil && pt.updates.Handled() >= last
		})
		q := held()
		if q == nil {
			t.Fatalf("%s: the controller holds no pod %s", what, p.UID)
		}
		if q.Labels["step"] != step || string(q.Status.QOSClass) != message {
			t.Fatalf("%s: the pod held has labels %v and status mark %q, want step %s and mark %q",
				what, q.Labels, q.Status.QOSClass, step, message)
		}
	}
	e.send(bus.OpUpdate, stamp("1", ""))
	e.send(bus.OpReconcile, stamp("1", "reconciled 1"))
	settled("an UPDATE, then a RECONCILE", "1", "reconciled 1")
	e.send(bus.OpReconcile, stamp("1", "reconciled 2"))
	e.send(bus.OpUpdate, stamp("2", ""))
	settled("a RECONCILE, then an UPDATE", "2", "")
	e.send(bus.OpUpdate, stamp("3", ""))
	e.send(bus.OpReconcile, stamp("3", "reconciled 3"))
	e.send(bus.OpReconcile, stamp("3", "reconciled 4"))
	settled("an UPDATE, then two RECONCILEs", "3", "reconciled 4")
}

func TestCrashLoopBackOffGrows(t *testing.T) {
	e := newEnv(t, "pw-crash")
	e.startReplica(t, config.RuntimeSim, nil)
	p := newPod(t, e.cs, "crash", func(p *corev1.Pod) {
		p.Spec.NodeName = e.node
		p.Annotations = map[string]string{sim.AnnotationExitCode: "3", sim.AnnotationExitAfter: "20ms"}
	})
	e.send(bus.OpAdd, p)
	eventually(t, 60*time.Second, "four restarts", func() bool {
		st, _ := e.get(p.UID)
		return st != nil && len(st.ContainerStatuses) > 0 && st.ContainerStatuses[0].RestartCount >= 4
	})
	// the back-off each CrashLoopBackOff waiting state announces, in order.
	var backOffs []time.Duration
	e.mu.Lock()
	for _, st := range e.seen {
		if st.UID != p.UID || len(st.ContainerStatuses) == 0 {
			continue
		}
		c := st.ContainerStatuses[0]
		w := c.State.Waiting
		if w == nil || w.Reason != "CrashLoopBackOff" {
			continue
		}
		if c.LastTerminationState.Terminated == nil || c.LastTerminationState.Terminated.ExitCode != 3 {
			t.Errorf("CrashLoopBackOff without the last exit (code 3): %+v", c.LastTerminationState)
		}
		var d string
		if _, err := fmt.Sscanf(w.Message, "back-off %s restarting", &d); err != nil {
			t.Fatalf("waiting message %q: %v", w.Message, err)
		}
		v, err := time.ParseDuration(d)
		if err != nil {
			t.Fatalf("waiting message %q: %v", w.Message, err)
		}
		if len(backOffs) == 0 || backOffs[len(backOffs)-1] != v {
			backOffs = append(backOffs, v)
		}
	}
	e.mu.Unlock()
	// kubelet: the back-off doubles from the base with every restart.
	if len(backOffs) < 3 {
		t.Fatalf("back-offs seen %v: want at least three", backOffs)
	}
	for i := 1; i < len(backOffs); i++ {
		if backOffs[i] != 2*backOffs[i-1] {
			t.Fatalf("back-off does not double: %v", backOffs)
		}
	}
	if backOffs[0] != 200*time.Millisecond {
		t.Fatalf("first back-off %v, want the configured base 200ms", backOffs[0])
	}
}

func TestAdmissionRejectsOversizedPod(t *testing.T) {
	e := newEnv(t, "pw-admit")
	// labels and a NoExecute taint for the predicates below, there before
	// the replica's node informer syncs.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: e.node, Labels: map[string]string{"disk": "ssd"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "example.com/drain", Effect: corev1.TaintEffectNoExecute}}}}
	tolerate := []corev1.Toleration{{Key: "example.com/drain", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}
	n, err := e.cs.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cs.CoreV1().Nodes().Delete(context.Background(), e.node, metav1.DeleteOptions{}) })
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi"), corev1.ResourcePods: resource.MustParse("10")}
	n.Status.Capacity = n.Status.Allocatable
	if _, err := e.cs.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.startReplica(t, config.RuntimeSim, nil)
	req := func(cpu string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.NodeName, p.Spec.Tolerations = e.node, tolerate
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
		}
	}
	small := newPod(t, e.cs, "small", req("500m"))
	big := newPod(t, e.cs, "big", req("2"))
	bad := newPod(t, e.cs, "bad", func(p *corev1.Pod) { p.Spec.NodeName = e.node })
	// bad input: a pod on the bus with no containers (the API would refuse it).
	noContainers := bad.DeepCopy()
	noContainers.Spec.Containers = nil
	e.send(bus.OpAdd, small)
	eventually(t, 30*time.Second, "small pod running", func() bool { st, _ := e.get(small.UID); return containerRunning(st) })
	e.send(bus.OpAdd, big, noContainers)
	eventually(t, 30*time.Second, "big pod rejected", func() bool {
		st, _ := e.get(big.UID)
		return st != nil && st.Phase == corev1.PodFailed && st.Terminated
	})
	st, _ := e.get(big.UID)
	if st.Reason != "OutOfcpu" || st.Message != "Pod was rejected: Node didn't have enough resource: cpu, requested: 2000, used: 500, capacity: 1000" {
		t.Fatalf("rejection %q: %q", st.Reason, st.Message)
	}
	eventually(t, 30*time.Second, "bad pod rejected", func() bool {
		st, _ := e.get(bad.UID)
		return st != nil && st.Phase == corev1.PodFailed && st.Reason == "InvalidPod"
	})
	eventually(t, 30*time.Second, "OutOfcpu event on the pod", func() bool {
		evs, err := e.cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(big.UID)})
		return err == nil && slices.ContainsFunc(evs.Items, func(ev corev1.Event) bool { return ev.Reason == "OutOfcpu" && ev.Type == corev1.EventTypeWarning })
	})
	// the small pod was not disturbed.
	if st, _ := e.get(small.UID); !containerRunning(st) {
		t.Fatalf("small pod %+v", st)
	}

	// the node's other predicates, each with the kubelet's reason and Event.
	bound := func(mod func(*corev1.Pod)) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.NodeName, p.Spec.Tolerations = e.node, tolerate
			mod(p)
		}
	}
	withPort := func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{HostPort: 18080, ContainerPort: 80}}
	}
	web := newPod(t, e.cs, "web", bound(withPort))
	clash := newPod(t, e.cs, "clash", bound(withPort))
	hdd := newPod(t, e.cs, "hdd", bound(func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"disk": "hdd"} }))
	intolerant := newPod(t, e.cs, "intolerant", bound(func(p *corev1.Pod) { p.Spec.Tolerations = nil }))
	sysctl := func(name string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: name, Value: "1"}}}
		}
	}
	unsafe := newPod(t, e.cs, "unsafe-sysctl", bound(sysctl("kernel.msgmax")))
	safe := newPod(t, e.cs, "safe-sysctl", bound(sysctl("kernel/shm_rmid_forced")))
	e.send(bus.OpAdd, web, safe)
	eventually(t, 30*time.Second, "pod with a host port running", func() bool { st, _ := e.get(web.UID); return containerRunning(st) })
	eventually(t, 30*time.Second, "pod with a safe sysctl running", func() bool { st, _ := e.get(safe.UID); return containerRunning(st) })
	windows := newPod(t, e.cs, "windows", bound(func(p *corev1.Pod) { p.Spec.OS = &corev1.PodOS{Name: corev1.Windows} }))
	e.send(bus.OpAdd, clash, hdd, intolerant, unsafe, windows)
	for _, c := range []struct {
		pod          *corev1.Pod
		reason, want string
	}{
		{clash, "NodePorts", "Pod was rejected: Predicate NodePorts failed: "},
		{hdd, "NodeAffinity", "Pod was rejected: Predicate NodeAffinity failed: "},
		{intolerant, "TaintToleration", "Pod was rejected: Predicate TaintToleration failed: "},
		{unsafe, "SysctlForbidden", `Pod was rejected: forbidden sysctl: "kernel.msgmax" not allowlisted`},
		{windows, "PodOSNotSupported", "Pod was rejected: Failed to admit pod as the OS field doesn't match node OS"},
	} {
		eventually(t, 30*time.Second, c.pod.Name+" rejected with "+c.reason, func() bool {
			st, _ := e.get(c.pod.UID)
			return st != nil && st.Phase == corev1.PodFailed && st.Reason == c.reason && strings.HasPrefix(st.Message, c.want)
		})
		eventually(t, 30*time.Second, c.reason+" event on "+c.pod.Name, func() bool {
			evs, err := e.cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(c.pod.UID)})
			return err == nil && slices.ContainsFunc(evs.Items, func(ev corev1.Event) bool { return ev.Reason == c.reason && ev.Type == corev1.EventTypeWarning })
		})
	}
}

func TestTwoReplicasShareAndHandOver(t *testing.T) {
	e := newEnv(t, "pw-scale")
	// two ids that share the partitions (left to their default, the host's
	// name and a random one, rendezvous gives one of them every partition
	// one time in eight).
	ids := spreadIDs(t, "two", 2)
	a := e.startReplica(t, config.RuntimeSim, func(c *Config) { c.ReplicaID = ids[0] })
	b := e.startReplica(t, config.RuntimeSim, func(c *Config) { c.ReplicaID = ids[1] })
	eventually(t, 30*time.Second, "partitions split between both replicas", func() bool {
		oa, ob := a.OwnedPartitions(), b.OwnedPartitions()
		all := append(append([]int{}, oa...), ob...)
		slices.Sort(all)
		return len(oa) > 0 && len(ob) > 0 && slices.Equal(all, []int{0, 1, 2, 3})
	})
	_, js := e.nats.Connect(t)
	eventually(t, 30*time.Second, "agent ready with two replicas", func() bool {
		ar := e.lastReadiness(t, js)
		return ar != nil && ar.Ready && ar.Partitions == partitions && len(ar.Replicas) == 2 && len(ar.Unowned) == 0
	})
	// at least 8 pods, and as many more as it takes for each replica to
	// own one of them (pods land in partitions by UID).
	var pods []*corev1.Pod
	owners := map[bool]bool{}
	for i := 0; i < 8 || len(owners) < 2; i++ {
		if i == 100 {
			t.Fatal("100 pods and one replica owns them all")
		}
		p := newPod(t, e.cs, fmt.Sprintf("scale-%d", i), func(p *corev1.Pod) { p.Spec.NodeName = e.node })
		pods = append(pods, p)
		owners[slices.Contains(a.OwnedPartitions(), bus.Partition(string(p.UID), partitions))] = true
	}
	e.send(bus.OpAdd, pods...)
	sources := map[string]bool{}
	eventually(t, 30*time.Second, "every pod running", func() bool {
		for _, p := range pods {
			if st, _ := e.get(p.UID); !containerRunning(st) {
				return false
			}
		}
		return true
	})
	for _, p := range pods {
		_, src := e.get(p.UID)
		sources[src] = true
	}
	if len(sources) != 2 {
		t.Fatalf("pods reported by %v, want both replicas", sources)
	}
	stopReplica(t, a)
	eventually(t, 15*time.Second, "the survivor owns every partition", func() bool {
		return slices.Equal(b.OwnedPartitions(), []int{0, 1, 2, 3})
	})
	eventually(t, 30*time.Second, "agent ready with one replica", func() bool {
		ar := e.lastReadiness(t, js)
		return ar != nil && ar.Ready && len(ar.Replicas) == 1 && ar.Replicas[0] == b.Source()
	})
	eventually(t, 30*time.Second, "every pod running on the survivor", func() bool {
		for _, p := range pods {
			st, src := e.get(p.UID)
			if src != b.Source() || !containerRunning(st) {
				return false
			}
		}
		return true
	})
	// order across the handover: a DELETE after the handover tears the pod down.
	e.send(bus.OpDelete, markDeleted(pods[0]))
	eventually(t, 30*time.Second, "deleted pod terminated by the survivor", func() bool {
		st, src := e.get(pods[0].UID)
		return st.Terminated && src == b.Source()
	})
	// the last replica leaving says so at once.
	stopReplica(t, b)
	if ar := e.lastReadiness(t, js); ar == nil || ar.Ready || ar.Reason != "PodWorkersStopped" || len(ar.Unowned) != partitions {
		t.Fatalf("readiness after the last replica stopped: %+v", ar)
	}
}

func TestProcessIgnoringSIGTERMIsKilledAfterGrace(t *testing.T) {
	e := newEnv(t, "pw-proc")
	e.startReplica(t, config.RuntimeProcess, nil)
	p := newPod(t, e.cs, "stubborn", func(p *corev1.Pod) {
		p.Spec.NodeName = e.node
		p.Spec.Containers[0].Command = []string{"sh", "-c", `trap "" TERM; echo started; while true; do sleep 0.1; done`}
	})
	e.send(bus.OpAdd, p)
	eventually(t, 30*time.Second, "process running", func() bool { st, _ := e.get(p.UID); return containerRunning(st) })
	st, _ := e.get(p.UID)
	if id := st.ContainerStatuses[0].ContainerID; len(id) < len("process://") || id[:len("process://")] != "process://" {
		t.Fatalf("container ID %q", id)
	}
	deletedAt := time.Now()
	e.send(bus.OpDelete, markDeleted(p)) // grace 1 s
	eventually(t, 30*time.Second, "pod terminated", func() bool { st, _ := e.get(p.UID); return st.Terminated })
	st, _ = e.get(p.UID)
	term := st.ContainerStatuses[0].State.Terminated
	if term == nil || term.ExitCode != 137 {
		t.Fatalf("final state %+v: want killed (137) after ignoring SIGTERM", st.ContainerStatuses[0].State)
	}
	// the kill came only after the grace period (SIGTERM was ignored).
	if term.FinishedAt.Time.Before(deletedAt.Add(-time.Second).Truncate(time.Second)) {
		t.Fatalf("finished at %v, before the grace period from %v", term.FinishedAt, deletedAt)
	}
}

// A replica that dies without handing over (its connection cut) loses its
// partitions to the survivor within 15 s.
func TestDeadReplicaPartitionsTakenOver(t *testing.T) {
	e := newEnv(t, "pw-dead")
	ids := spreadIDs(t, "dead", 2)
	a, connA := e.startReplicaConn(t, config.RuntimeSim, func(c *Config) { c.ReplicaID = ids[0] })
	b := e.startReplica(t, config.RuntimeSim, func(c *Config) { c.ReplicaID = ids[1] })
	eventually(t, 30*time.Second, "partitions split between both replicas", func() bool {
		oa, ob := a.OwnedPartitions(), b.OwnedPartitions()
		return len(oa) > 0 && len(ob) > 0 && len(oa)+len(ob) == partitions
	})
	var pods []*corev1.Pod
	for i := 0; i < 6; i++ {
		pods = append(pods, newPod(t, e.cs, fmt.Sprintf("dead-%d", i), func(p *corev1.Pod) { p.Spec.NodeName = e.node }))
	}
	e.send(bus.OpAdd, pods...)
	eventually(t, 30*time.Second, "every pod running", func() bool {
		for _, p := range pods {
			if st, _ := e.get(p.UID); !containerRunning(st) {
				return false
			}
		}
		return true
	})
	connA.NC.Close() // the replica is gone for the bus: no heartbeat, no release
	eventually(t, 15*time.Second, "the survivor owns every partition", func() bool {
		return slices.Equal(b.OwnedPartitions(), []int{0, 1, 2, 3})
	})
	eventually(t, 30*time.Second, "every pod running on the survivor", func() bool {
		for _, p := range pods {
			if st, src := e.get(p.UID); src != b.Source() || !containerRunning(st) {
				return false
			}
		}
		return true
	})
	// updates after the takeover apply on top of the rebuilt state.
	e.send(bus.OpDelete, markDeleted(pods[1]))
	e.send(bus.OpRemove, pods[2])
	eventually(t, 30*time.Second, "deleted and removed pods torn down by the survivor", func() bool {
		s1, src1 := e.get(pods[1].UID)
		s2, src2 := e.get(pods[2].UID)
		return s1.Terminated && s2.Terminated && src1 == b.Source() && src2 == b.Source()
	})
}

// checkRuntimeRequests asks the owner of the pod's partition for logs, exec
// and stats over the bus, as nodehb and the prober do.
func (e *env) checkRuntimeRequests(t *testing.T, p *corev1.Pod) {
	t.Helper()
	part := bus.Partition(string(p.UID), partitions)
	subj := bus.For(e.node)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ref := bus.ContainerRef{PodUID: p.UID, Namespace: p.Namespace, Pod: p.Name, Container: "app"}
	// the container's first line may reach its log file a moment after
	// the runtime reports it running: polled.
	var logs bytes.Buffer
	var logsErr error
	eventually(t, 15*time.Second, "the container's logs", func() bool {
		logs.Reset()
		logsErr = e.pub.RequestLogs(ctx, subj.Logs(part), &bus.LogsRequest{ContainerRef: ref}, &logs)
		return logsErr == nil && logs.Len() > 0
	})
	missing := ref
	missing.Container = "nope"
	if err := e.pub.RequestLogs(ctx, subj.Logs(part), &bus.LogsRequest{ContainerRef: missing}, io.Discard); err == nil {
		t.Fatal("logs of an unknown container: no error")
	}
	env, err := e.pub.Request(ctx, subj.Exec(part), bus.KindExecRequest, &bus.ExecRequest{ContainerRef: ref, Command: []string{"true"}, TimeoutSeconds: 5})
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	res, err := bus.DecodeExecResult(env)
	if err != nil || res.Error != "" || res.ExitCode != 0 {
		t.Fatalf("exec result %+v, %v", res, err)
	}
	e.checkStream(ctx, t, p)
	env, err = e.pub.Request(ctx, subj.Stats(part), bus.KindStatsRequest, &bus.StatsRequest{})
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	stats, err := bus.DecodeStatsResult(env)
	if err != nil || !slices.ContainsFunc(stats.Pods, func(ps bus.PodStats) bool { return ps.UID == p.UID && len(ps.Containers) == 1 }) {
		t.Fatalf("stats %+v, %v", stats, err)
	}
}

// lastReadiness reads the last AgentReadiness kept on state.agent.
func (e *env) lastReadiness(t *testing.T, js jetstream.JetStream) *bus.AgentReadiness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, bus.StreamName(e.node, bus.StreamState))
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, bus.For(e.node).AgentReady())
	if err != nil {
		return nil
	}
	env, err := bus.Decode(m.Data)
	if err != nil {
		t.Fatal(err)
	}
	ar, err := bus.DecodeAgentReadiness(env)
	if err != nil {
		t.Fatal(err)
	}
	return ar
}

// kubelet: a sidecar with a startup probe holds the app container back
// until the prober's startup success reaches the replica over the bus.
func TestSidecarWaitsForItsStartupProbe(t *testing.T) {
	e := newEnv(t, "pw-sidecar")
	e.startReplica(t, config.RuntimeSim, nil)
	always := corev1.ContainerRestartPolicyAlways
	p := newPod(t, e.cs, "sidecar", func(p *corev1.Pod) {
		p.Spec.NodeName = e.node
		p.Spec.InitContainers = []corev1.Container{{Name: "proxy", Image: "busybox", RestartPolicy: &always,
			StartupProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}}}
	})
	e.send(bus.OpAdd, p)
	var proxy string
	eventually(t, 30*time.Second, "the sidecar running", func() bool {
		st, _ := e.get(p.UID)
		if st == nil || len(st.InitContainerStatuses) == 0 || st.InitContainerStatuses[0].State.Running == nil {
			return false
		}
		proxy = st.InitContainerStatuses[0].ContainerID
		return true
	})
	// a later status of the same pod (the resync) still holds the app back.
	e.send(bus.OpUpdate, p)
	eventually(t, 30*time.Second, "a status after the update", func() bool {
		st, _ := e.get(p.UID)
		return st != nil && len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Waiting != nil
	})
	if st, _ := e.get(p.UID); containerRunning(st) {
		t.Fatalf("the app runs before the sidecar's startup probe passed: %+v", st.ContainerStatuses)
	}
	part := bus.Partition(string(p.UID), partitions)
	e.publish(bus.For(e.node).ProbeResults(part), bus.KindProbeResult, "", &bus.ProbeResult{PodUID: p.UID, Namespace: p.Namespace, Name: p.Name,
		Container: "proxy", ContainerID: proxy, Probe: bus.ProbeStartup, Result: bus.ProbeSuccess})
	eventually(t, 30*time.Second, "the app running after the startup success", func() bool {
		st, _ := e.get(p.UID)
		return containerRunning(st)
	})
}

// mustBusMetrics is a set of bus metrics on a registry of its own.
func mustBusMetrics(t testing.TB) *bus.Metrics {
	m, err := bus.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return m
}
