package service

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/messaging"
	"github.com/splitlet/splitlet/libs/recording"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/sim"
	"github.com/splitlet/splitlet/libs/tracing"
)

// The test binary runs a shadow pod worker as a child process of its own
// (so that the test can kill it with SIGKILL) when this variable names
// the node; shadowChildEnv* give it the bus and the API server.
const (
	shadowChildNode       = "SPLITLET_TEST_SHADOW_NODE"
	shadowChildNATS       = "SPLITLET_TEST_SHADOW_NATS"
	shadowChildKubeconfig = "SPLITLET_TEST_SHADOW_KUBECONFIG"
	// shadowAPIWrite starts the child's line for each API request it tried
	// other than a read.
	shadowAPIWrite = "SHADOW-API-WRITE"
)

// TestShadowPodWorkerChangesNothing: a shadow pod worker (--shadow, in a
// process of its own) beside a live replica on the sim runtime decides on
// the live pod updates and probe results and publishes what it would under
// shadow.podworkers: the same pod statuses as the live replica (the same
// containers, the restart a liveness failure asks for, the termination of
// a deleted pod) and, as ShadowEvents, the container Events it would
// record (Killing, Created, Started), reading through durables of its own.
// The node does the same as without it: the live runtime holds the
// containers the live replica alone would start (no second start, no
// second restart), no shadow status reaches the live subjects, it holds no
// partition lease and tries no write to the API server. Killed with SIGKILL, it leaves the live node as
// it was: its pods keep their containers, a new pod starts once.
func TestShadowPodWorkerChangesNothing(t *testing.T) {
	e := newEnv(t, "pw-shadow")
	liveRT := sim.New()
	e.startReplicaRuntime(t, config.RuntimeSim, nil, liveRT)
	mk := func(name string) *corev1.Pod {
		return newPod(t, e.cs, name, func(p *corev1.Pod) { p.Spec.NodeName = e.node })
	}
	a := mk("shadow-a")
	e.send(bus.OpAdd, a)
	eventually(t, 30*time.Second, "pod a running live", func() bool { st, _ := e.get(a.UID); return containerRunning(st) })

	shadow := e.watchShadow(t)
	child := startShadowChild(t, e)
	// a pod from before the shadow: it adopts the live container.
	shadow.waitSame(t, e, a.UID, "pod a's shadow status as the live one")
	b := mk("shadow-b")
	e.send(bus.OpAdd, b)
	shadow.waitSame(t, e, b.UID, "pod b's shadow status as the live one")
	// a liveness failure: both decide on the restart, the live one does it.
	st, _ := e.get(a.UID)
	first := st.ContainerStatuses[0].ContainerID
	part := bus.Partition(string(a.UID), partitions)
	e.publish(bus.For(e.node).ProbeResults(part), bus.KindProbeResult, "", &bus.ProbeResult{PodUID: a.UID, Namespace: a.Namespace, Name: a.Name,
		Container: "app", ContainerID: first, Probe: bus.ProbeLiveness, Result: bus.ProbeFailure, Message: "probe failed"})
	eventually(t, 30*time.Second, "pod a restarted live", func() bool {
		st, _ := e.get(a.UID)
		return containerRunning(st) && st.ContainerStatuses[0].RestartCount == 1
	})
	shadow.waitSame(t, e, a.UID, "pod a's shadow status after the restart")
	e.send(bus.OpDelete, markDeleted(b))
	eventually(t, 30*time.Second, "pod b terminated live", func() bool { st, _ := e.get(b.UID); return st.Terminated })
	shadow.waitSame(t, e, b.UID, "pod b's terminated shadow status")

	checkLiveUnchanged(t, e, liveRT, a.UID, 2)
	e.checkLiveDiff(t)
	shadow.waitEvents(t, map[types.UID][]string{a.UID: {"Killing", "Created", "Started"}, b.UID: {"Created", "Started", "Killing"}})
	if n := child.count("decision recorded, not carried out"); n == 0 {
		t.Error("the shadow recorded no decision (start, stop): it did not decide")
	}
	e.checkShadowConsumers(t)

	// kill -9 of the shadow: the live node goes on as before.
	child.kill9(t)
	c := mk("shadow-c")
	e.send(bus.OpAdd, c)
	eventually(t, 30*time.Second, "pod c running live after the shadow died", func() bool { st, _ := e.get(c.UID); return containerRunning(st) })
	checkLiveUnchanged(t, e, liveRT, a.UID, 2)
	if n := len(liveRT.PodContainers(c.UID)); n != 1 {
		t.Errorf("pod c: %d container instances live, want 1", n)
	}
	if lines := child.lines(shadowAPIWrite); len(lines) > 0 {
		t.Errorf("the shadow tried to write to the API server: %v", lines)
	}
}

// checkLiveUnchanged: pod uid holds want container instances in the live
// runtime, no status on the live subjects came from a shadow, and the
// lease bucket names the live replica alone.
func checkLiveUnchanged(t *testing.T, e *env, rt runtime.Runtime, uid types.UID, want int) {
	t.Helper()
	if n := len(rt.PodContainers(uid)); n != want {
		t.Errorf("pod %s: %d container instances in the live runtime, want %d (a shadow starts nothing)", uid, n, want)
	}
	e.mu.Lock()
	for i, from := range e.seenFrom {
		if strings.HasPrefix(from, "shadow") {
			t.Errorf("a live pod status from %s: %+v", from, e.seen[i])
		}
	}
	e.mu.Unlock()
	_, js := e.nats.Connect(t)
	kv, err := js.KeyValue(t.Context(), bus.LeaseBucket(e.node))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeys(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys.Keys() {
		if strings.Contains(k, "shadow") {
			t.Errorf("lease bucket key %s: a shadow takes no lease", k)
		}
	}
}

// checkLiveDiff: `splitlet bus diff --live podworkers` (recording.Live)
// finds the shadow's statuses and no difference.
func (e *env) checkLiveDiff(t *testing.T) {
	t.Helper()
	_, js := e.nats.Connect(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	sum, err := recording.Live(ctx, js, recording.LiveOptions{Node: e.node, Stage: bus.StagePodworkers, Settle: time.Second}, func(ev recording.LiveEvent) {
		if d := ev.Difference; d != nil {
			t.Errorf("live diff: %s differs:\n live   %v\n shadow %v", d.Key, d.Live, d.Shadow)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Shadow == 0 || sum.Keys < 2 || sum.Differ != 0 {
		t.Errorf("live diff summary %+v: want the shadow's statuses of both pods, none differing", sum)
	}
}

// checkShadowConsumers: the live replica and the shadow both follow the
// probe results (ordered consumers), so neither leaves a durable consumer
// on the probes stream for the other to take, and both read them (the
// shadow's status after the liveness failure says it did).
func (e *env) checkShadowConsumers(t *testing.T) {
	t.Helper()
	_, js := e.nats.Connect(t)
	name := bus.StreamName(e.node, bus.StreamProbes)
	s, err := js.Stream(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	list := s.ListConsumers(t.Context())
	followers := 0
	for c := range list.Info() {
		if c.Config.Durable != "" {
			t.Errorf("durable consumer %s on %s: the pod workers keep none there", c.Name, name)
		}
		followers++
	}
	if err := list.Err(); err != nil {
		t.Fatal(err)
	}
	if followers < 2*partitions {
		t.Errorf("%d consumers on %s: want a follower per partition of the live replica and of the shadow (%d)", followers, name, 2*partitions)
	}
}

// shadowView is what the shadow published of each pod.
type shadowView struct {
	mu     sync.Mutex
	status map[types.UID]*bus.PodRuntimeStatus
	// events are the reasons of the ShadowEvents of each pod.
	events map[types.UID][]string
	wrong  []string
}

// watchShadow follows the shadow's pod statuses in the shadow stream.
func (e *env) watchShadow(t *testing.T) *shadowView {
	t.Helper()
	_, js := e.nats.Connect(t)
	if err := bus.EnsureShadowStream(t.Context(), js, e.node, 1); err != nil {
		t.Fatal(err)
	}
	v := &shadowView{status: map[types.UID]*bus.PodRuntimeStatus{}, events: map[types.UID][]string{}}
	prefix := bus.For(e.node).Shadow(bus.StagePodworkers)
	cons, err := js.OrderedConsumer(t.Context(), bus.StreamName(e.node, bus.StreamShadow), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		env, err := bus.Decode(m.Data())
		if err != nil {
			return
		}
		v.mu.Lock()
		defer v.mu.Unlock()
		if env.Kind == bus.KindShadowEvent {
			ev, err := bus.DecodeShadowEvent(env)
			if err != nil || m.Subject() != prefix.ShadowEvents(bus.Partition(string(ev.UID), partitions)) {
				v.wrong = append(v.wrong, m.Subject())
				return
			}
			v.events[ev.UID] = append(v.events[ev.UID], ev.Reason)
			return
		}
		st, err := bus.DecodePodRuntimeStatus(env)
		if err != nil || m.Subject() != prefix.PodStatus(bus.Partition(string(st.UID), partitions)) {
			v.wrong = append(v.wrong, m.Subject())
			return
		}
		v.status[st.UID] = st
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return v
}

// waitSame waits until the shadow's last status of the pod is the live
// one's (but for the times each side takes itself).
func (v *shadowView) waitSame(t *testing.T, e *env, uid types.UID, what string) {
	t.Helper()
	var last string
	deadline := time.Now().Add(30 * time.Second)
	for {
		live, _ := e.get(uid)
		v.mu.Lock()
		sh, wrong := v.status[uid], v.wrong
		v.mu.Unlock()
		if len(wrong) > 0 {
			t.Fatalf("shadow messages on the wrong subjects: %v", wrong)
		}
		if live != nil && sh != nil {
			a, b := statusKey(live), statusKey(sh)
			if a == b {
				return
			}
			last = fmt.Sprintf("live  %s\nshadow %s", a, b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s:\n%s", what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitEvents waits until the shadow published, for each pod, ShadowEvents
// of each reason wanted.
func (v *shadowView) waitEvents(t *testing.T, want map[types.UID][]string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v.mu.Lock()
		var missing []string
		for uid, reasons := range want {
			for _, r := range reasons {
				if !slices.Contains(v.events[uid], r) {
					missing = append(missing, fmt.Sprintf("%s of %s (have %v)", r, uid, v.events[uid]))
				}
			}
		}
		v.mu.Unlock()
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("shadow Events missing: %v", missing)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// statusKey is a status without what each side stamps itself: times.
func statusKey(st *bus.PodRuntimeStatus) string {
	c := *st
	c.StartTime = nil
	strip := func(list []corev1.ContainerStatus) []corev1.ContainerStatus {
		out := make([]corev1.ContainerStatus, len(list))
		for i, cs := range list {
			cs = *cs.DeepCopy()
			for _, s := range []*corev1.ContainerState{&cs.State, &cs.LastTerminationState} {
				if s.Running != nil {
					s.Running.StartedAt = metav1.Time{}
				}
				if s.Terminated != nil {
					s.Terminated.StartedAt, s.Terminated.FinishedAt = metav1.Time{}, metav1.Time{}
				}
			}
			out[i] = cs
		}
		return out
	}
	c.ContainerStatuses, c.InitContainerStatuses = strip(c.ContainerStatuses), strip(c.InitContainerStatuses)
	b, _ := json.Marshal(c)
	return string(b)
}

// shadowChild is the shadow pod worker process.
type shadowChild struct {
	cmd  *exec.Cmd
	logs *apptest.Buffer
	done chan struct{}
}

// startShadowChild runs the test binary as a shadow pod worker of e's node
// (TestMain: runShadowChild), stopped (SIGTERM) when the test ends.
func startShadowChild(t *testing.T, e *env) *shadowChild {
	t.Helper()
	c := &shadowChild{logs: &apptest.Buffer{}, done: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), shadowChildNode+"="+e.node, shadowChildNATS+"="+e.nats.URL, shadowChildKubeconfig+"="+controlPlane(t).Kubeconfig)
	c.cmd.Stdout, c.cmd.Stderr = c.logs, c.logs
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(15 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
		if t.Failed() {
			t.Logf("shadow log:\n%s", tail(c.logs.String(), 8000))
		}
	})
	return c
}

func (c *shadowChild) kill9(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.done
}

func (c *shadowChild) lines(substr string) []string {
	var out []string
	for _, l := range strings.Split(c.logs.String(), "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

func (c *shadowChild) count(substr string) int { return len(c.lines(substr)) }

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// runShadowChild runs a shadow pod worker (the sim runtime's) until
// SIGTERM, logging at debug level to stderr; every API request it makes
// other than a read is refused and logged (shadowAPIWrite).
func runShadowChild(node string) int {
	log, _ := zap.NewDevelopment()
	cfg := &Config{}
	fs := pflag.NewFlagSet("shadow", pflag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		log.Error("flags", zap.Error(err))
		return 2
	}
	cfg.Housekeeping, cfg.ContainerBackOff, cfg.BackOffPeriod = 200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
	// the container Events a live pod worker of a real runtime records,
	// published by the shadow (the sim runtime's default records none).
	cfg.ContainerEvents = config.SwitchOn
	url := os.Getenv(shadowChildNATS)
	common := &config.Common{NodeName: node, Partitions: partitions, Runtime: config.RuntimeSim, DataDir: os.TempDir(), NATSURL: url, NATSReplicas: 1, Shadow: true}
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv(shadowChildKubeconfig))
	if err != nil {
		log.Error("kubeconfig", zap.Error(err))
		return 2
	}
	rc.Wrap(func(next http.RoundTripper) http.RoundTripper { return refuseWrites{next} })
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		log.Error("clientset", zap.Error(err))
		return 2
	}
	conn, err := messaging.Connect(messaging.Options{URL: url, Node: node, Name: "podworkers-shadow-test", Log: log})
	if err != nil {
		log.Error("nats", zap.Error(err))
		return 2
	}
	r, err := New(cfg, common, log, conn, conn.JS, cs, prometheus.NewRegistry(), nil, tracing.Noop())
	if err == nil {
		err = r.Start(context.Background())
	}
	if err != nil {
		log.Error("start", zap.Error(err))
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_ = r.Stop(sctx)
	return 0
}

// refuseWrites passes reads and refuses, with a log line, any other request.
type refuseWrites struct{ next http.RoundTripper }

func (r refuseWrites) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet || req.Method == http.MethodHead {
		return r.next.RoundTrip(req)
	}
	fmt.Fprintf(os.Stderr, "%s %s %s\n", shadowAPIWrite, req.Method, req.URL.Path)
	return nil, fmt.Errorf("shadow test: %s %s refused", req.Method, req.URL.Path)
}
