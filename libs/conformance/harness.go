package conformance

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
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/splitlet/splitlet/libs/bus"
)

// The sources the kit publishes as when it plays the other stages.
const (
	SourceAPI        = "api"
	SourcePodWorkers = "podworkers-conformance"
	SourceProber     = "prober-conformance"
	SourcePodConfig  = "podconfig"
)

// harness is the kit's side of the bus for one suite.
type harness struct {
	tg       Target
	opts     *options
	nc       *nats.Conn
	js       jetstream.JetStream
	subjects bus.Subjects
	api      *bus.Publisher
	workers  *bus.Publisher
	prober   *bus.Publisher
	config   *bus.Publisher
	// pubMu keeps the kit's sequence numbers in publish order: cases run
	// in parallel, and a receiver drops a message whose seq is not above
	// the last one it took from that source on that subject.
	pubMu sync.Mutex
}

func newHarness(t *testing.T, tg Target, opts []Option) *harness {
	t.Helper()
	tg = tg.withDefaults()
	if tg.NATSURL == "" || tg.Node == "" {
		t.Fatal("conformance: Target needs NATSURL and Node")
	}
	nc, err := nats.Connect(tg.NATSURL, append([]nats.Option{nats.Name("splitlet-conformance")}, tg.NATSOptions...)...)
	if err != nil {
		t.Fatalf("conformance: connect to %s: %v", tg.NATSURL, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), tg.Timeout)
	defer cancel()
	if err := bus.EnsureStreams(ctx, js, tg.Node); err != nil {
		t.Fatalf("conformance: %v", err)
	}
	return &harness{
		tg: tg, opts: collect(opts), nc: nc, js: js, subjects: bus.For(tg.Node),
		api:     bus.NewPublisher(nc, js, tg.Node, SourceAPI, tg.publisherOptions()...),
		workers: bus.NewPublisher(nc, js, tg.Node, SourcePodWorkers, tg.publisherOptions()...),
		prober:  bus.NewPublisher(nc, js, tg.Node, SourceProber, tg.publisherOptions()...),
		config:  bus.NewPublisher(nc, js, tg.Node, SourcePodConfig, tg.publisherOptions()...),
	}
}

// run runs one case as a subtest unless it is skipped.
func (h *harness) run(t *testing.T, name string, parallel bool, f func(t *testing.T)) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		if h.opts.skip[name] {
			t.Skipf("skipped by the caller (conformance.Skip)")
		}
		if parallel {
			t.Parallel()
		}
		f(t)
	})
}

func (h *harness) partition(uid string) int { return bus.Partition(uid, h.tg.Partitions) }

// newPod is a pod bound to the target's node with a fresh UID.
func (h *harness) newPod(name string, containers ...corev1.Container) *corev1.Pod {
	uid := uuid.NewUUID()
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("%s-%s", name, string(uid)[:8]), Namespace: h.tg.Namespace, UID: uid,
			CreationTimestamp: metav1.Now(), ResourceVersion: "1",
		},
		Spec: corev1.PodSpec{
			NodeName: h.tg.Node, Containers: containers, RestartPolicy: corev1.RestartPolicyAlways,
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

// sendPods publishes a PodUpdate of the api source, one message per
// partition, on the subject podconfig uses for op: a RECONCILE on the
// partition's reconcile subject, anything else on its pod
// updates subject.
func (h *harness) sendPods(t testing.TB, op bus.Op, pods ...*corev1.Pod) {
	t.Helper()
	byPart := map[int][]corev1.Pod{}
	for _, p := range pods {
		n := h.partition(string(p.UID))
		byPart[n] = append(byPart[n], *p)
	}
	for n, ps := range byPart {
		h.publish(t, h.api, h.subjects.PodUpdatesFor(op, n), bus.KindPodUpdate, op, &bus.PodUpdate{Pods: ps})
	}
}

func (h *harness) publish(t testing.TB, pub *bus.Publisher, subject string, kind bus.Kind, op bus.Op, payload any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h.pubMu.Lock()
	defer h.pubMu.Unlock()
	if err := pub.Publish(ctx, subject, kind, op, payload); err != nil {
		t.Fatalf("conformance: %v", err)
	}
}

// sendStatus publishes a PodRuntimeStatus as the pod workers would.
func (h *harness) sendStatus(t testing.TB, st *bus.PodRuntimeStatus) {
	t.Helper()
	h.publish(t, h.workers, h.subjects.PodStatus(h.partition(string(st.UID))), bus.KindPodRuntimeStatus, "", st)
}

// runningStatus is the runtime status of a pod whose containers all run
// with the given IDs (container name → ID), started at startedAt.
func (h *harness) runningStatus(pod *corev1.Pod, ids map[string]string, startedAt time.Time) *bus.PodRuntimeStatus {
	st := &bus.PodRuntimeStatus{
		UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name,
		PodIP: h.tg.ProbeHost, HostIP: h.tg.ProbeHost, StartTime: &metav1.Time{Time: startedAt},
	}
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name:        c.Name,
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Time{Time: startedAt}}},
			Image:       c.Image,
			ImageID:     "sim://" + c.Image,
			ContainerID: ids[c.Name],
			Started:     ptr(true),
		})
	}
	return st
}

func ptr[T any](v T) *T { return &v }

// received is one message the kit saw.
type received struct {
	subject string
	env     *bus.Envelope
}

// watcher records every message on a subject from the moment it is made.
type watcher struct {
	h    *harness
	what string
	mu   sync.Mutex
	msgs []received
	bad  []string
	// changed is closed (and replaced) on every message, waking every
	// waiter: the cases run in parallel, and a one-slot notification woke
	// only one of them, leaving another asleep over its own message.
	changed chan struct{}
}

// watch subscribes to a subject (wildcards allowed) until t ends. Messages
// from the sources named in skip (the kit's own) are left out.
func (h *harness) watch(t testing.TB, subject string, skip ...string) *watcher {
	t.Helper()
	w := &watcher{h: h, what: subject, changed: make(chan struct{})}
	own := map[string]bool{}
	for _, s := range skip {
		own[s] = true
	}
	sub, err := h.nc.Subscribe(subject, func(m *nats.Msg) {
		e, err := bus.DecodeMsg(m.Header, m.Data)
		w.mu.Lock()
		if err != nil {
			w.bad = append(w.bad, fmt.Sprintf("%s: %v", m.Subject, err))
		} else if !own[e.Source] {
			w.msgs = append(w.msgs, received{subject: m.Subject, env: e})
		}
		close(w.changed)
		w.changed = make(chan struct{})
		w.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return w
}

// find returns the index of the first message from index `from` on that
// matches.
func (w *watcher) find(from int, match func(received) bool) (int, []string) {
	i, bad, _ := w.findOrWait(from, match)
	return i, bad
}

// findOrWait is find, and the channel closed by the next message (taken
// under the same lock, so that no message slips in between).
func (w *watcher) findOrWait(from int, match func(received) bool) (int, []string, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	next := w.changed
	for i := from; i < len(w.msgs); i++ {
		if match(w.msgs[i]) {
			return i, w.bad, next
		}
	}
	return -1, w.bad, next
}

func (w *watcher) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.msgs)
}

// waitFor waits until a message from index `from` on matches, and returns
// its index. It fails the test at the target's timeout, or at once when the
// stage publishes a message that does not decode.
func (w *watcher) waitFor(t testing.TB, from int, what string, match func(received) bool) (int, received) {
	t.Helper()
	deadline := time.NewTimer(w.h.tg.Timeout)
	defer deadline.Stop()
	for {
		i, bad, next := w.findOrWait(from, match)
		if len(bad) > 0 {
			t.Fatalf("the stage published messages that do not decode on %s: %s", w.what, strings.Join(bad, "; "))
		}
		if i >= 0 {
			w.mu.Lock()
			r := w.msgs[i]
			w.mu.Unlock()
			return i, r
		}
		select {
		case <-next:
		case <-deadline.C:
			t.Fatalf("no message within %v on %s: %s (saw %d others: %s; consumers: %s)", w.h.tg.Timeout, w.what, what, w.count(), w.summary(from), w.h.consumers())
		}
	}
}

// never checks that no message from index `from` on matches during window.
// (An absence can only be observed over a window; the window is not a wait
// for something to happen.)
func (w *watcher) never(t testing.TB, from int, window time.Duration, what string, match func(received) bool) {
	t.Helper()
	end := time.NewTimer(window)
	defer end.Stop()
	for {
		i, _, next := w.findOrWait(from, match)
		if i >= 0 {
			w.mu.Lock()
			r := w.msgs[i]
			w.mu.Unlock()
			t.Fatalf("unexpected message on %s: %s: %s", r.subject, what, payloadText(r.env))
		}
		select {
		case <-next:
		case <-end.C:
			if i, _ := w.find(from, match); i >= 0 {
				t.Fatalf("unexpected message: %s", what)
			}
			return
		}
	}
}

func (w *watcher) summary(from int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	n := 0
	for i := max(from, len(w.msgs)-8); i < len(w.msgs); i++ {
		fmt.Fprintf(&b, "[%s %s %s] ", w.msgs[i].subject, w.msgs[i].env.Kind, payloadText(w.msgs[i].env))
		n++
	}
	if n == 0 {
		return "none"
	}
	return b.String()
}

// listener is a TCP probe target of the kit, on the target's probe host.
// While closed it keeps its port bound without listening (portHold):
// connections are refused, and no other listener of a concurrent test can
// be handed the port, which would answer the probe in its place. The
// listening socket and the hold share the port through SO_REUSEPORT, so
// the port is never free between the two.
type listener struct {
	host string
	port int
	mu   sync.Mutex
	l    net.Listener
	hold *portHold
	done chan struct{}
}

func newListener(t testing.TB, host string) *listener {
	t.Helper()
	l := &listener{host: host}
	if err := l.open(0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.release)
	return l
}

// closedPort returns a port on host that refuses connections until reopen.
func closedPort(t testing.TB, host string) *listener {
	t.Helper()
	l := &listener{host: host}
	h, err := holdPort(host, 0)
	if err != nil {
		t.Fatal(err)
	}
	l.hold, l.port = h, h.port
	t.Cleanup(l.release)
	return l
}

func (l *listener) open(port int) error {
	lc := net.ListenConfig{Control: reusePort}
	ln, err := lc.Listen(context.Background(), "tcp", net.JoinHostPort(l.host, fmt.Sprint(port)))
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.l, l.port, l.done = ln, ln.Addr().(*net.TCPAddr).Port, make(chan struct{})
	done, hold := l.done, l.hold
	l.hold = nil
	l.mu.Unlock()
	if hold != nil {
		hold.close()
	}
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	return nil
}

// reopen listens again on the same port.
func (l *listener) reopen(t testing.TB) {
	t.Helper()
	if err := l.open(l.port); err != nil {
		t.Fatalf("cannot listen again on port %d: %v", l.port, err)
	}
}

// close stops listening and holds the port: connections are refused.
func (l *listener) close(t testing.TB) {
	t.Helper()
	h, err := holdPort(l.host, l.port)
	if err != nil {
		t.Fatalf("cannot hold port %d while it is closed: %v", l.port, err)
	}
	l.mu.Lock()
	l.hold = h
	l.mu.Unlock()
	l.stop()
}

// stop closes the listening socket, if any, and waits for its accept loop.
func (l *listener) stop() {
	l.mu.Lock()
	ln, done := l.l, l.done
	l.l = nil
	l.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
		<-done
	}
}

// release closes the listener and frees the port.
func (l *listener) release() {
	l.stop()
	l.mu.Lock()
	h := l.hold
	l.hold = nil
	l.mu.Unlock()
	if h != nil {
		h.close()
	}
}

// consumed names the last message the kit published on a subject, and the
// durable consumer of the stage that must take it in.
type consumed struct {
	stream, durable, subject string
}

// waitConsumed waits until the stage's durable consumer has acknowledged
// the last message on c.subject: over the bus, that is the one sign that a
// stage has taken a message in. It also checks that the stage consumes
// with the durable name the contract gives it.
func (h *harness) waitConsumed(t testing.TB, c consumed) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), h.tg.Timeout)
	defer cancel()
	stream, err := h.js.Stream(ctx, bus.StreamName(h.tg.Node, c.stream))
	if err != nil {
		t.Fatal(err)
	}
	last, err := stream.GetLastMsgForSubject(ctx, c.subject)
	if err != nil {
		t.Fatalf("last message on %s: %v", c.subject, err)
	}
	var floor uint64
	for {
		cons, err := stream.Consumer(ctx, c.durable)
		if err == nil {
			info, err := cons.Info(ctx)
			if err == nil {
				floor = info.AckFloor.Stream
				if floor >= last.Sequence {
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("durable consumer %s of stream %s did not acknowledge message %d within %v (ack floor %d, err %v)",
				c.durable, c.stream, last.Sequence, h.tg.Timeout, floor, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// consumers describes every durable consumer of the node's streams (what
// each has delivered, acknowledged and still has pending), so that a
// timeout says whether a message sat in the stage's consumer or the stage
// had it and did nothing.
func (h *harness) consumers() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var b strings.Builder
	for _, what := range []string{bus.StreamPodUpdates, bus.StreamPodStatus, bus.StreamProbes} {
		stream, err := h.js.Stream(ctx, bus.StreamName(h.tg.Node, what))
		if err != nil {
			fmt.Fprintf(&b, "[%s: %v] ", what, err)
			continue
		}
		list := stream.ListConsumers(ctx)
		for info := range list.Info() {
			fmt.Fprintf(&b, "[%s/%s delivered %d ackFloor %d ackPending %d redelivered %d pending %d] ", what, info.Name,
				info.Delivered.Stream, info.AckFloor.Stream, info.NumAckPending, info.NumRedelivered, info.NumPending)
		}
		if err := list.Err(); err != nil {
			fmt.Fprintf(&b, "[%s: %v] ", what, err)
		}
	}
	return b.String()
}

// payloadText is a message's payload as a person reads it: JSON.
func payloadText(e *bus.Envelope) string {
	if j, err := e.AsJSON(); err == nil {
		return string(j.Payload)
	}
	return fmt.Sprintf("(%d bytes of %s)", len(e.Payload), e.Encoding)
}

// boundedRedelivery checks that each of the stage's durable consumers (c's
// stream and durable) bounds its deliveries on the server: max_deliver
// more than 1 (a message in hand when the stage dies comes back) and not
// unlimited (one whose handling keeps failing ends; docs/bus.md, "Failed
// messages").
func (h *harness) boundedRedelivery(t *testing.T, cs ...consumed) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), h.tg.Timeout)
	defer cancel()
	for _, c := range cs {
		var info *jetstream.ConsumerInfo
		for info == nil {
			cons, err := h.js.Consumer(ctx, bus.StreamName(h.tg.Node, c.stream), c.durable)
			if err == nil {
				info, err = cons.Info(ctx)
			}
			if err != nil {
				select {
				case <-ctx.Done():
					t.Fatalf("durable consumer %s of stream %s: %v", c.durable, c.stream, err)
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
		if md := info.Config.MaxDeliver; md <= 1 {
			t.Errorf("durable consumer %s of stream %s has max_deliver %d, want a bound above 1 (docs/bus.md, \"Failed messages\")",
				c.durable, c.stream, md)
		}
	}
}
