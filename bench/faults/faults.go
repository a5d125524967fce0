package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/splitlet/splitlet/bench/internal/poll"
	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/periodic"
	"github.com/splitlet/splitlet/libs/runtime/sim"
	"github.com/splitlet/splitlet/libs/testenv"
)

// faultEnv is what every case runs against: one control plane, the
// binaries, a work directory.
type faultEnv struct {
	cp         *testenv.ControlPlane
	cs         kubernetes.Interface
	kubeconfig string
	caFile     string
	binDir     string
	work       string
	// containerd endpoint for the CRI cases ("" when none was asked for).
	criEndpoint string
	// criNodes are the nodes started on criEndpoint: the sandboxes the
	// suite removes at its end are theirs alone (the containerd may be
	// shared with other tests).
	criNodes []string
}

// faultCase is one fault: how the agent runs, how many pods, what is done
// to it once about half the pods are Ready.
type faultCase struct {
	Name     string
	Runtime  string
	Replicas int
	Pods     int
	// Done pods: restartPolicy Never, exit 0 at once (Succeeded).
	Done int
	// Outage is how long the killed process stays down before it starts
	// again (0: it does not).
	Outage time.Duration
	// Kill names the process killed with SIGKILL ("" for none).
	Kill string
	// Poison publishes malformed messages instead of killing anything.
	Poison bool
	// NATSServers > 1: NATS as a cluster of that many servers, streams
	// at that many replicas (docs/nats-cluster.md).
	NATSServers int
}

// faultResult is what a case measured.
type faultResult struct {
	Case        string         `json:"case"`
	Pods        int            `json:"pods"`
	Ready       int            `json:"ready"`
	Lost        int            `json:"lost"`
	Restarted   int            `json:"restarted"`
	Hidden      int            `json:"hiddenRestarts"`
	Rewritten   int            `json:"terminalRewritten"`
	Leaked      int            `json:"leakedProcesses"`
	NotReadySec float64        `json:"nodeNotReadySeconds"`
	ConvergeSec float64        `json:"convergeSeconds"`
	Crashes     map[string]int `json:"crashes,omitempty"`
	Notes       []string       `json:"notes,omitempty"`
}

// failures lists what misses the targets: loss, rewritten terminal
// statuses, leaks, crashes, hidden restarts, and on sim and CRI any restart.
func (r *faultResult) failures(c faultCase) []string {
	var out []string
	if r.Lost > 0 {
		out = append(out, fmt.Sprintf("%d pods lost", r.Lost))
	}
	if r.Rewritten > 0 {
		out = append(out, fmt.Sprintf("%d terminal statuses rewritten", r.Rewritten))
	}
	if r.Leaked > 0 {
		out = append(out, fmt.Sprintf("%d processes leaked", r.Leaked))
	}
	if len(r.Crashes) > 0 {
		out = append(out, fmt.Sprintf("crashes %v", r.Crashes))
	}
	if r.Hidden > 0 {
		out = append(out, fmt.Sprintf("%d hidden restarts", r.Hidden))
	}
	if c.Runtime != "process" && r.Restarted > 0 {
		out = append(out, fmt.Sprintf("%d containers restarted", r.Restarted))
	}
	return out
}

// instance is a container as the API shows it.
type instance struct {
	id       string
	restarts int32
	term     string // exit code, reason, ID of a terminated container
}

func snapshot(ctx context.Context, cs kubernetes.Interface, label string) (map[string]instance, map[string]*corev1.Pod, error) {
	list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "faults=" + label})
	if err != nil {
		return nil, nil, err
	}
	out := map[string]instance{}
	pods := map[string]*corev1.Pod{}
	for i := range list.Items {
		p := &list.Items[i]
		pods[p.Name] = p
		for _, c := range p.Status.ContainerStatuses {
			in := instance{id: c.ContainerID, restarts: c.RestartCount}
			if t := c.State.Terminated; t != nil {
				in.term = fmt.Sprintf("%d/%s/%s", t.ExitCode, t.Reason, t.ContainerID)
			}
			out[p.Name+"/"+c.Name] = in
		}
	}
	return out, pods, nil
}

func settledPod(p *corev1.Pod) bool {
	if p.Spec.RestartPolicy == corev1.RestartPolicyNever {
		return p.Status.Phase == corev1.PodSucceeded
	}
	return poll.IsPodReady(p)
}

// nodeWatch sums the time the Node was not Ready after it first was.
type nodeWatch struct {
	mu       sync.Mutex
	notReady time.Duration
	stop     context.CancelFunc
	done     chan struct{}
}

func watchNode(cs kubernetes.Interface, node string) *nodeWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &nodeWatch{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		const every = 250 * time.Millisecond
		seenReady := false
		periodic.Run(ctx, every, func(ctx context.Context) {
			n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return
			}
			ready := poll.IsNodeReady(n)
			seenReady = seenReady || ready
			if seenReady && !ready {
				w.mu.Lock()
				w.notReady += every
				w.mu.Unlock()
			}
		})
	}()
	return w
}

func (w *nodeWatch) end() time.Duration {
	w.stop()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.notReady
}

// markerEnv marks every process of a case's pods (process runtime), so
// that one left after the pods are gone is found.
const markerEnv = "SPLITLET_FAULTS_MARKER"

func podSpec(c faultCase, node string, done bool) corev1.PodSpec {
	spec := corev1.PodSpec{
		NodeName:                      node,
		TerminationGracePeriodSeconds: ptr(int64(2)),
		Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		Containers: []corev1.Container{{Name: "c", Image: "busybox", ImagePullPolicy: corev1.PullIfNotPresent,
			Command: []string{"sleep", "infinity"}}},
	}
	switch c.Runtime {
	case "process":
		// a background child in the container's group: what a SIGKILLed
		// pod worker would leave behind.
		spec.Containers[0].Command = []string{"sh", "-c", "sleep 100000 & exec sleep 100001"}
		spec.Containers[0].Env = []corev1.EnvVar{{Name: markerEnv, Value: node}}
	case "cri":
		spec.HostNetwork = true
		spec.Containers[0].Command = []string{"sleep", "100000"}
	}
	if done {
		spec.RestartPolicy = corev1.RestartPolicyNever
		spec.Containers[0].Command = []string{"true"}
	}
	return spec
}

func ptr[T any](v T) *T { return &v }

// podCapacity is the node's pod capacity a case needs: its burst with room
// to spare where the runtime's default (110 on process and CRI) is short;
// zero keeps the default.
func podCapacity(c faultCase) int {
	if c.Runtime == "sim" || c.Pods+c.Done <= 100 {
		return 0
	}
	return c.Pods + c.Done + 10
}

// runFaultCase runs one case on a fresh node and measures it.
func runFaultCase(ctx context.Context, env *faultEnv, c faultCase, logf func(string, ...any)) (*faultResult, error) {
	node := "faults-" + c.Name
	r := &faultRun{env: env, c: c, node: node, label: node, logf: logf, res: &faultResult{Case: c.Name, Pods: c.Pods + c.Done}}
	a, err := startAgent(env, node, agentOptions{runtime: c.Runtime, replicas: c.Replicas, criEndpoint: env.criEndpoint, natsServers: c.NATSServers, pods: podCapacity(c)})
	if err != nil {
		return nil, err
	}
	defer a.stop()
	r.a = a
	if err := waitUntil(ctx, 90*time.Second, "node "+node+" Ready", func() (bool, string) { return poll.NodeReady(ctx, env.cs, node), "" }); err != nil {
		return nil, err
	}
	nw := watchNode(env.cs, node)
	defer nw.end()
	errs := make(chan error, 1)
	go func() { errs <- createPods(ctx, env.cs, c, node, r.label) }()
	// the fault comes when about half the pods are Ready.
	if _, err := r.waitSettled(ctx, max((c.Pods+c.Done)/2, 1), "half the pods settled"); err != nil {
		return nil, err
	}
	before, beforePods, err := snapshot(ctx, env.cs, r.label)
	if err != nil {
		return nil, err
	}
	expect, err := r.concerned(ctx, beforePods)
	if err != nil {
		return nil, err
	}
	restartAt, err := r.inject(ctx)
	if err != nil {
		return nil, err
	}
	if err := <-errs; err != nil {
		return nil, err
	}
	r.waitReported(ctx, expect, restartAt)
	after, pods, err := r.converge(ctx, restartAt)
	if err != nil {
		return nil, err
	}
	r.compare(before, after, pods)
	r.res.NotReadySec = nw.end().Seconds()
	r.res.Crashes = a.crashes()
	if err := r.teardown(ctx); err != nil {
		return nil, err
	}
	return r.res, nil
}

// faultRun is one fault case under way.
type faultRun struct {
	env         *faultEnv
	c           faultCase
	a           *agent
	node, label string
	logf        func(string, ...any)
	res         *faultResult
}

// waitSettled waits until at least n of the case's pods are settled and
// returns them.
func (r *faultRun) waitSettled(ctx context.Context, n int, what string) (map[string]*corev1.Pod, error) {
	var pods map[string]*corev1.Pod
	err := waitUntil(ctx, 3*time.Minute, what, func() (bool, string) {
		var err error
		if _, pods, err = snapshot(ctx, r.env.cs, r.label); err != nil {
			return false, err.Error()
		}
		settled := 0
		for _, p := range pods {
			if settledPod(p) {
				settled++
			}
		}
		return settled >= n, fmt.Sprintf("%d of %d settled", settled, n)
	})
	return pods, err
}

// concerned lists the pods whose pod worker the fault takes away, which
// must be reported again (by the restarted replica, or the survivors); nil
// when the fault takes none.
func (r *faultRun) concerned(ctx context.Context, pods map[string]*corev1.Pod) (map[string]bool, error) {
	switch {
	case strings.HasPrefix(r.c.Kill, "podworkers"):
		parts, err := ownedBy(ctx, r.a.natsURL, r.node, r.c.Kill)
		if err != nil {
			return nil, err
		}
		expect := map[string]bool{}
		for _, p := range pods {
			if parts[bus.Partition(string(p.UID), partitions)] {
				expect[string(p.UID)] = true
			}
		}
		return expect, nil
	case r.c.Kill == "nats-server":
		expect := map[string]bool{}
		for _, p := range pods {
			expect[string(p.UID)] = true
		}
		return expect, nil
	}
	return nil, nil
}

// inject brings the case's fault and returns when what it killed was back
// (when it began, for a fault with no outage).
func (r *faultRun) inject(ctx context.Context) (time.Time, error) {
	c := r.c
	at := time.Now()
	switch {
	case c.Poison:
		notes, err := poison(ctx, r.a, r.node)
		if err != nil {
			return time.Time{}, err
		}
		r.res.Notes = append(r.res.Notes, notes...)
	case c.Kill == apiServer:
		r.logf("%s: SIGKILL kube-apiserver", c.Name)
		r.env.cp.KillAPIServer()
		time.Sleep(c.Outage) // the outage itself
		if err := r.env.cp.RestartAPIServer(ctx); err != nil {
			return time.Time{}, err
		}
		at = time.Now()
	case c.Kill != "":
		p := r.a.procs[c.Kill]
		if p == nil {
			return time.Time{}, fmt.Errorf("no process %q", c.Kill)
		}
		r.logf("%s: SIGKILL %s", c.Name, c.Kill)
		p.kill()
		if c.Outage > 0 {
			// the outage itself: the process stays down this long.
			time.Sleep(c.Outage)
			if err := p.start(); err != nil {
				return time.Time{}, err
			}
			at = time.Now()
		}
	}
	return at, nil
}

// waitReported waits until every pod the fault concerned is reported
// again on the bus (the API may still show what was there before it).
func (r *faultRun) waitReported(ctx context.Context, expect map[string]bool, restartAt time.Time) {
	if expect == nil {
		return
	}
	since := restartAt
	if r.c.Outage == 0 {
		since = restartAt.Add(-time.Second)
	}
	if err := waitUntil(ctx, 3*time.Minute, "every pod of the lost pod worker reported again", func() (bool, string) {
		seen, err := reportedSince(ctx, r.a.natsURL, r.node, since)
		if err != nil {
			return false, err.Error()
		}
		missing := 0
		for uid := range expect {
			if !seen[uid] {
				missing++
			}
		}
		return missing == 0, fmt.Sprintf("%d of %d not reported yet", missing, len(expect))
	}); err != nil {
		r.res.Notes = append(r.res.Notes, err.Error())
	}
}

// converge waits until every pod settles after the fault and counts the
// settled and the lost.
func (r *faultRun) converge(ctx context.Context, restartAt time.Time) (map[string]instance, map[string]*corev1.Pod, error) {
	_, convergeErr := r.waitSettled(ctx, r.res.Pods, "every pod settled after the fault")
	r.res.ConvergeSec = time.Since(restartAt).Seconds()
	after, pods, err := snapshot(ctx, r.env.cs, r.label)
	if err != nil {
		return nil, nil, err
	}
	for _, p := range pods {
		if settledPod(p) {
			r.res.Ready++
		}
	}
	r.res.Lost = r.res.Pods - r.res.Ready
	if convergeErr != nil {
		r.res.Notes = append(r.res.Notes, convergeErr.Error())
		for _, p := range pods {
			if !settledPod(p) {
				r.res.Notes = append(r.res.Notes, fmt.Sprintf("unsettled %s: %s %s %q %+v", p.Name, p.Status.Phase, p.Status.Reason, p.Status.Message, p.Status.ContainerStatuses))
				break
			}
		}
	}
	return after, pods, nil
}

// compare counts the containers the fault restarted (and those restarted
// with no restart count to show it) and the terminal statuses rewritten.
func (r *faultRun) compare(before, after map[string]instance, pods map[string]*corev1.Pod) {
	res := r.res
	for key, b := range before {
		now, ok := after[key]
		if !ok || b.id == "" {
			continue
		}
		if now.id != b.id || now.restarts != b.restarts {
			res.Restarted++
			if now.restarts == b.restarts {
				res.Hidden++
			}
			if res.Restarted <= 3 {
				res.Notes = append(res.Notes, fmt.Sprintf("restarted %s: %.12s (restarts %d) became %.12s (restarts %d)", key,
					strings.TrimPrefix(b.id, "containerd://"), b.restarts, strings.TrimPrefix(now.id, "containerd://"), now.restarts))
			}
		}
		if pod := strings.SplitN(key, "/", 2)[0]; b.term != "" && now.term != b.term && isDone(pods[pod]) {
			res.Rewritten++
		}
	}
}

// teardown deletes the case's pods; then nothing of theirs may be left.
func (r *faultRun) teardown(ctx context.Context) error {
	if err := r.env.cs.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "faults=" + r.label}); err != nil {
		return err
	}
	if err := waitUntil(ctx, 2*time.Minute, "every pod gone", func() (bool, string) {
		_, pods, err := snapshot(ctx, r.env.cs, r.label)
		left := fmt.Sprint(len(pods), " left")
		for _, p := range pods {
			// the first one named, with what it shows, for a closer look
			left += fmt.Sprintf(", %s %s %v", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
			break
		}
		return err == nil && len(pods) == 0, left
	}); err != nil {
		r.res.Notes = append(r.res.Notes, err.Error())
	}
	if r.c.Runtime == "process" {
		// the sweep of a dead replica's process groups runs every 5 s.
		_ = waitUntil(ctx, 15*time.Second, "no process of the pods left", func() (bool, string) {
			r.res.Leaked = markedProcesses(r.node)
			return r.res.Leaked == 0, fmt.Sprint(r.res.Leaked)
		})
	}
	return nil
}

func isDone(p *corev1.Pod) bool { return p != nil && p.Spec.RestartPolicy == corev1.RestartPolicyNever }

func createPods(ctx context.Context, cs kubernetes.Interface, c faultCase, node, label string) error {
	const concurrency = 20
	total := c.Pods + c.Done
	next := make(chan int)
	var wg sync.WaitGroup
	errs := make(chan error, concurrency)
	for range concurrency {
		wg.Go(func() {
			for i := range next {
				done := i >= c.Pods
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%05d", node, i), Labels: map[string]string{"faults": label}},
					Spec:       podSpec(c, node, done),
				}
				if done && c.Runtime == "sim" {
					pod.Annotations = map[string]string{sim.AnnotationExitCode: "0", sim.AnnotationExitAfter: "10ms"}
				}
				if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
					select {
					case errs <- fmt.Errorf("create %s: %w", pod.Name, err):
					default:
					}
				}
			}
		})
	}
	for i := range total {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	return <-errs
}

// poison publishes what no stage should act on: bytes that are not an
// envelope, an envelope of another schema version, a payload of the wrong
// kind, and a PodUpdate for a pod that is not in the API server.
func poison(ctx context.Context, a *agent, node string) ([]string, error) {
	nc, err := nats.Connect(a.natsURL)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	s := bus.For(node)
	for _, data := range [][]byte{
		[]byte("not json"),
		[]byte(`{"schemaVersion":99,"kind":"PodUpdate","node":"` + node + `","source":"api","seq":1,"payload":{}}`),
		[]byte(`{"schemaVersion":1,"kind":"ProbeResult","node":"` + node + `","source":"api","op":"ADD","seq":2,"payload":{"pods":"x"}}`),
	} {
		if err := nc.Publish(s.PodUpdates(0), data); err != nil {
			return nil, err
		}
		if err := nc.Publish(s.PodStatus(0), data); err != nil {
			return nil, err
		}
	}
	// a pod only the bus knows of.
	pub := bus.NewPublisher(nc, nil, node, "faults-poison")
	ghost := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ghost", Namespace: "default", UID: "faults-ghost-0001"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "1"}}}}}
	data, _, err := pub.Seal(bus.KindPodUpdate, bus.OpAdd, &bus.PodUpdate{Pods: []corev1.Pod{ghost}})
	if err != nil {
		return nil, err
	}
	if err := nc.Publish(s.PodUpdates(bus.Partition(string(ghost.UID), partitions)), data); err != nil {
		return nil, err
	}
	return []string{"published 6 malformed messages and a PodUpdate of a pod the API server does not have"}, nc.FlushTimeout(10 * time.Second)
}

// markedProcesses counts live processes whose environment carries the
// case's marker.
func markedProcesses(node string) int {
	envs, _ := filepath.Glob("/proc/[0-9]*/environ")
	want := []byte(markerEnv + "=" + node + "\x00")
	n := 0
	for _, e := range envs {
		b, err := os.ReadFile(e)
		if err != nil || !bytes.Contains(append(b, 0), want) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(filepath.Dir(e), "stat"))
		if err != nil {
			continue
		}
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X') {
			continue
		}
		n++
	}
	return n
}

// waitUntil checks cond every 200 ms (poll.Until).
func waitUntil(ctx context.Context, timeout time.Duration, what string, cond func() (bool, string)) error {
	return poll.Until(ctx, timeout, 200*time.Millisecond, what, func() (bool, string, error) {
		ok, state := cond()
		return ok, state, nil
	})
}

func waitPort(port int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("port %d not listening within %s", port, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// apiServer names the control plane's API server as what a case kills.
const apiServer = "kube-apiserver"

// partitions is the stages' default partition count.
const partitions = 16

// ownedBy reads the lease bucket: the partitions replica holds.
func ownedBy(ctx context.Context, url, node, replica string) (map[int]bool, error) {
	js, done, err := connect(url)
	if err != nil {
		return nil, err
	}
	defer done()
	kv, err := js.KeyValue(ctx, bus.LeaseBucket(node))
	if err != nil {
		return nil, err
	}
	out := map[int]bool{}
	for p := 0; p < partitions; p++ {
		e, err := kv.Get(ctx, fmt.Sprintf("partition.%d", p))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(e.Value())); len(f) > 0 && f[0] == replica {
			out[p] = true
		}
	}
	return out, nil
}

// reportedSince reads the node's pod status stream from since: the pods
// some pod worker reported.
func reportedSince(ctx context.Context, url, node string, since time.Time) (map[string]bool, error) {
	js, done, err := connect(url)
	if err != nil {
		return nil, err
	}
	defer done()
	s, err := js.Stream(ctx, bus.StreamName(node, bus.StreamPodStatus))
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	if info.State.LastTime.Before(since) {
		return out, nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &since})
	if err != nil {
		return nil, err
	}
	for {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			return out, err
		}
		n := 0
		last := uint64(0)
		for m := range batch.Messages() {
			n++
			if e, err := bus.Decode(m.Data()); err == nil {
				if st, err := bus.DecodePodRuntimeStatus(e); err == nil {
					out[string(st.UID)] = true
				}
			}
			if md, err := m.Metadata(); err == nil {
				last = md.Sequence.Stream
			}
		}
		if n == 0 || last >= info.State.LastSeq {
			return out, nil
		}
	}
}

// connect is a JetStream handle on url; done closes it.
func connect(url string) (jetstream.JetStream, func(), error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return js, nc.Close, nil
}
