package bus_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
)

// Redelivery kept short for the tests: 4 deliveries 40, 80, 160 ms apart.
const (
	testRetry    = 40 * time.Millisecond
	testMaxRetry = 160 * time.Millisecond
	testDeliver  = 4
	testRecover  = 100 * time.Millisecond
)

// podState is a stage's view in small: the last message taken about each
// pod, and every call of its handler.
type podState struct {
	mu     sync.Mutex
	reject map[types.UID]bool
	// rejectSeq: the one message of the pod rejected, by envelope seq.
	rejectSeq map[types.UID]uint64
	// calls: when and with what the handler was called, for each pod.
	calls map[types.UID][]call
	// taken: the last runtime status taken (its envelope seq), or the pod
	// of the last pod update or SET that listed it.
	taken map[types.UID]uint64
	pods  map[types.UID]bool
}

type call struct {
	at         time.Time
	seq        uint64
	recovering bool
}

func newPodState() *podState {
	return &podState{reject: map[types.UID]bool{}, rejectSeq: map[types.UID]uint64{}, calls: map[types.UID][]call{}, taken: map[types.UID]uint64{}, pods: map[types.UID]bool{}}
}

func (s *podState) setReject(uid types.UID, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reject[uid] = on
}

// status takes PodRuntimeStatus messages, ordered per pod as the stages do
// (OrderedByHandler), rejecting those of the pods marked to reject.
func (s *podState) status(ctx context.Context, _ string, e *bus.Envelope) error {
	rs, err := bus.DecodePodRuntimeStatus(e)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[rs.UID] = append(s.calls[rs.UID], call{at: time.Now(), seq: e.Seq, recovering: bus.Recovering(ctx)})
	if s.reject[rs.UID] || s.rejectSeq[rs.UID] == e.Seq {
		return errors.New("rejected by the test")
	}
	s.taken[rs.UID] = e.Seq
	return nil
}

// podUpdate takes PodUpdate messages: ADD adds, SET replaces the partition.
func (s *podState) podUpdate(ctx context.Context, _ string, e *bus.Envelope) error {
	u, err := bus.DecodePodUpdate(e)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range u.Pods {
		uid := u.Pods[i].UID
		s.calls[uid] = append(s.calls[uid], call{at: time.Now(), seq: e.Seq, recovering: bus.Recovering(ctx)})
		if s.reject[uid] {
			return errors.New("rejected by the test")
		}
	}
	if e.Op == bus.OpSet {
		clear(s.pods)
	}
	for i := range u.Pods {
		s.pods[u.Pods[i].UID] = true
	}
	return nil
}

func (s *podState) callsOf(uid types.UID) []call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]call(nil), s.calls[uid]...)
}

// deliveries are the calls by the consumer, not by the recovery.
func (s *podState) deliveries(uid types.UID) []call {
	var out []call
	for _, c := range s.callsOf(uid) {
		if !c.recovering {
			out = append(out, c)
		}
	}
	return out
}

func (s *podState) takenOf(uid types.UID) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.taken[uid]
}

func (s *podState) has(uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pods[uid]
}

// consumeForTest consumes stream with the test's delays; it returns the
// metrics the consumer counts in.
func consumeForTest(t *testing.T, js jetstream.JetStream, stream, durable string, log *zap.Logger, perPod bool, h bus.Handler) *bus.Metrics {
	t.Helper()
	m := newTestMetrics(t)
	stop, err := bus.Consume(t.Context(), js, bus.ConsumerOptions{
		Stream: bus.StreamName("n", stream), Durable: durable, DeliverPolicy: jetstream.DeliverAllPolicy,
		RetryDelay: testRetry, MaxRetryDelay: testMaxRetry, MaxDeliveries: testDeliver, RecoverEvery: testRecover,
		OrderedByHandler: perPod, Logger: log, Metrics: m,
	}, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return m
}

func publishStatus(t *testing.T, pub *bus.Publisher, uid types.UID) {
	t.Helper()
	st := &bus.PodRuntimeStatus{UID: uid, Namespace: "default", Name: "pod-" + string(uid)}
	if err := pub.Publish(t.Context(), bus.For("n").PodStatus(bus.Partition(string(uid), bus.DefaultPartitions)),
		bus.KindPodRuntimeStatus, "", st); err != nil {
		t.Fatal(err)
	}
}

// TestHandlerErrorIsBounded: a handler that fails on every delivery of a
// message gets it a bounded number of times, each after a longer delay
// (capped); then the message is terminated, counted and logged with its
// subject, stream sequence, consumer and pod, and the server's consumer is
// bounded too. Once the handler takes it again, the consumer recovers the
// pod's status from the stream.
func TestHandlerErrorIsBounded(t *testing.T) {
	js, pub := nodeN(t, "podworkers-1")
	core, logs := observer.New(zapcore.InfoLevel)
	const durable = "bounded"
	s := newPodState()
	const uid = types.UID("rejected-pod")
	s.setReject(uid, true)
	m := consumeForTest(t, js, bus.StreamPodStatus, durable, zap.New(core), true, s.status)
	publishStatus(t, pub, uid)

	testenv.EventuallyTrue(t, 15*time.Second, "the termination", func() bool {
		return testutil.ToFloat64(m.HandlerTerminations.WithLabelValues(durable)) == 1
	})
	waitDrained(t, js, bus.StreamName("n", bus.StreamPodStatus), durable)
	calls := s.deliveries(uid)
	if len(calls) != testDeliver {
		t.Fatalf("handler called %d times, want %d", len(calls), testDeliver)
	}
	want := testRetry
	for i := 1; i < len(calls); i++ {
		if gap := calls[i].at.Sub(calls[i-1].at); gap < want {
			t.Errorf("delivery %d came %v after the one before, want at least %v", i+1, gap, want)
		}
		want = min(2*want, testMaxRetry)
	}
	checkTerminationLog(t, logs, durable, uid)
	cons, err := js.Consumer(t.Context(), bus.StreamName("n", bus.StreamPodStatus), durable)
	if err != nil {
		t.Fatal(err)
	}
	if md := cons.CachedInfo().Config.MaxDeliver; md <= testDeliver {
		t.Errorf("server MaxDeliver %d, want a bound above the consumer's %d", md, testDeliver)
	}

	s.setReject(uid, false)
	testenv.EventuallyTrue(t, 15*time.Second, "the status recovered from the stream", func() bool { return s.takenOf(uid) != 0 })
	calls = s.callsOf(uid)
	if last := calls[len(calls)-1]; !last.recovering || last.seq != calls[0].seq {
		t.Errorf("recovered with %+v, want the terminated message (seq %d) marked as recovering", last, calls[0].seq)
	}
}

func checkTerminationLog(t *testing.T, logs *observer.ObservedLogs, durable string, uid types.UID) {
	t.Helper()
	lines := logs.FilterMessageSnippet("terminating the message").All()
	if len(lines) != 1 {
		t.Fatalf("%d termination log lines, want 1: %v", len(lines), logs.All())
	}
	f := lines[0].ContextMap()
	for k, want := range map[string]any{"consumer": durable, "uid": string(uid), "pod": "default/pod-" + string(uid),
		"delivered": uint64(testDeliver), "subject": bus.For("n").PodStatus(bus.Partition(string(uid), bus.DefaultPartitions))} {
		if f[k] != want {
			t.Errorf("termination log %s = %v, want %v", k, f[k], want)
		}
	}
	if seq, _ := f["streamSeq"].(uint64); seq == 0 {
		t.Errorf("termination log without the stream sequence: %v", f)
	}
}

// TestTerminatedUpdateRecoveredBySnapshot: a pod update whose handler
// always fails is terminated, and the pod it carried comes with the next
// SET of its partition.
func TestTerminatedUpdateRecoveredBySnapshot(t *testing.T) {
	js, pub := nodeN(t, "api")
	core, logs := observer.New(zapcore.InfoLevel)
	const durable = "snapshot"
	s := newPodState()
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "snapshot-pod"},
		Spec: corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	s.setReject(pod.UID, true)
	consumeForTest(t, js, bus.StreamPodUpdates, durable, zap.New(core), false, s.podUpdate)
	subject := bus.For("n").PodUpdates(bus.Partition(string(pod.UID), bus.DefaultPartitions))
	if err := pub.Publish(t.Context(), subject, bus.KindPodUpdate, bus.OpAdd, &bus.PodUpdate{Pods: []corev1.Pod{pod}}); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyTrue(t, 15*time.Second, "the ADD terminated", func() bool { return len(s.callsOf(pod.UID)) == testDeliver })
	waitDrained(t, js, bus.StreamName("n", bus.StreamPodUpdates), durable)
	if s.has(pod.UID) {
		t.Fatal("the rejected pod was taken")
	}
	s.setReject(pod.UID, false)
	if err := pub.Publish(t.Context(), subject, bus.KindPodUpdate, bus.OpSet, &bus.PodUpdate{Pods: []corev1.Pod{pod}}); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyTrue(t, 15*time.Second, "the pod from the SET", func() bool { return s.has(pod.UID) })
	testenv.EventuallyTrue(t, 15*time.Second, "the mark settled", func() bool { return logs.FilterMessageSnippet("settled a terminated one").Len() == 1 })
	if n := len(s.callsOf(pod.UID)); n != testDeliver+1 {
		t.Errorf("handler called %d times for the pod, want %d (the ADD's deliveries and the SET)", n, testDeliver+1)
	}
}

// TestNewerMessageSettlesTerminated: a newer status of the pod, taken
// after an older one was terminated, settles it: the recovery no longer
// hands the older one to the handler (seen once a later recovery, of
// another pod, has run).
func TestNewerMessageSettlesTerminated(t *testing.T) {
	js, pub := nodeN(t, "podworkers-1")
	const durable = "settled"
	s := newPodState()
	const uid, other = types.UID("overtaken"), types.UID("recovered-later")
	s.setReject(uid, true)
	consumeForTest(t, js, bus.StreamPodStatus, durable, zap.NewNop(), true, s.status)
	publishStatus(t, pub, uid)
	testenv.EventuallyTrue(t, 15*time.Second, "the first status terminated", func() bool { return len(s.deliveries(uid)) == testDeliver })
	waitDrained(t, js, bus.StreamName("n", bus.StreamPodStatus), durable)
	// the terminated message is still rejected, the newer one is not
	s.mu.Lock()
	s.reject[uid], s.rejectSeq[uid] = false, s.calls[uid][0].seq
	s.mu.Unlock()
	publishStatus(t, pub, uid)
	testenv.EventuallyTrue(t, 15*time.Second, "the newer status", func() bool { return s.takenOf(uid) != 0 })
	newer := s.takenOf(uid)

	s.setReject(other, true)
	publishStatus(t, pub, other)
	testenv.EventuallyTrue(t, 15*time.Second, "the other pod's status terminated", func() bool { return len(s.deliveries(other)) == testDeliver })
	waitDrained(t, js, bus.StreamName("n", bus.StreamPodStatus), durable)
	s.setReject(other, false)
	testenv.EventuallyTrue(t, 15*time.Second, "the other pod recovered", func() bool { return s.takenOf(other) != 0 })
	if got := s.takenOf(uid); got != newer {
		t.Errorf("pod's status went from seq %d back to %d", newer, got)
	}
	if calls := s.callsOf(uid); calls[len(calls)-1].seq != newer {
		t.Errorf("the handler was last given seq %d, after the newer %d", calls[len(calls)-1].seq, newer)
	}
}

// TestUnboundedConsumerIsBoundedInPlace: a durable consumer made without a
// delivery bound (by another program, or by hand) is updated in place: it gets the
// bound and resumes where it was, with the message left unacknowledged
// when its stage was killed delivered again and nothing redelivered from
// before.
func TestUnboundedConsumerIsBoundedInPlace(t *testing.T) {
	js, pub := nodeN(t, "podworkers-1")
	const durable = "unbounded"
	stream := bus.StreamName("n", bus.StreamPodStatus)
	if _, err := js.CreateOrUpdateConsumer(t.Context(), stream, jetstream.ConsumerConfig{
		Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxDeliver: -1,
	}); err != nil {
		t.Fatal(err)
	}
	publishStatus(t, pub, "acked")
	publishStatus(t, pub, "in-hand")
	cons, err := js.Consumer(t.Context(), stream, durable)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(2, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range batch.Messages() {
		if n == 0 {
			if err := m.DoubleAck(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		n++ // the second stays unacknowledged: the stage was killed
	}
	if n != 2 {
		t.Fatalf("fetched %d messages, want 2", n)
	}
	s := newPodState()
	stop, err := bus.Consume(t.Context(), js, bus.ConsumerOptions{Stream: stream, Durable: durable, AckWait: time.Second,
		OrderedByHandler: true}, s.status)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	info, err := cons.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxDeliver != 2*bus.DefaultMaxDeliveries {
		t.Errorf("MaxDeliver %d after the update, want %d", info.Config.MaxDeliver, 2*bus.DefaultMaxDeliveries)
	}
	testenv.EventuallyTrue(t, 15*time.Second, "the message in hand delivered again", func() bool { return s.takenOf("in-hand") != 0 })
	waitDrained(t, js, stream, durable)
	if c := s.callsOf("acked"); len(c) != 0 {
		t.Errorf("the acknowledged message was delivered again: %v", c)
	}
}
