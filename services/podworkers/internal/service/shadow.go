package service

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/services/podworkers/internal/shadowrt"
	"github.com/splitlet/splitlet/services/podworkers/internal/statuspub"
)

// runShadow runs the stage as a shadow of the live pod workers (the shadow
// key; docs/bus.md, "Shadow stages"). It takes no partition lease: it
// follows every partition's pod updates and probe results with consumers
// of its own, decides as a live replica owning all of them would, and
// publishes its pod statuses under splitlet.v1.<node>.shadow.podworkers.
// Its runtime (shadowrt) is the live runtime as the live pod workers'
// statuses show it: each start, stop or removal it decides on is recorded,
// not carried out. It answers no runtime request, sets up no volume, runs
// no garbage collection or cgroup housekeeping, says nothing of the node's
// readiness, and publishes the Events it would record as ShadowEvent
// messages under its prefix.
func (r *Runner) runShadow(ctx context.Context) error {
	node := r.common.NodeName
	if err := bus.EnsureShadowStream(ctx, r.js, node, r.common.NATSReplicas); err != nil {
		return err
	}
	rt := shadowrt.New(r.common.Runtime, 0, r.log.Named("shadowrt"))
	defer func() { _ = rt.Close() }()
	stopMirror, err := r.mirrorLive(ctx, rt)
	if err != nil {
		return err
	}
	defer stopMirror()
	allocatable, thisNode, stopNode := r.watchNode(ctx)
	defer stopNode()
	pub := bus.NewPublisher(r.conn.NC, r.js, node, r.Source(), r.common.BusEncodingOption())
	recorder := shadowRecorder{log: r.log.Named("events"), pub: pub, subjects: r.subjects.Shadow(bus.StagePodworkers), partitions: r.common.Partitions}
	syncOpts, _, stopSync := r.syncOptions(ctx, rt, recorder, allocatable, false)
	defer stopSync()
	sink := statuspub.New(pub, r.common.Partitions, r.isActive, r.log.Named("status"))
	sink.SetSubjects(r.subjects.Shadow(bus.StagePodworkers))
	// it holds every partition in its own view: no other replica's pods
	// count against it.
	ctrl, err := r.newController(rt, sink, recorder, allocatable, thisNode, func(types.UID) []*corev1.Pod { return nil }, syncOpts)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.rt, r.ctrl, r.pub, r.sink = rt, ctrl, pub, sink
	r.mu.Unlock()

	ctrlCtx, stopCtrl := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); ctrl.Run(ctrlCtx) }()
	go func() { defer wg.Done(); sink.Run(ctrlCtx) }()
	defer func() { stopCtrl(); wg.Wait() }()
	stopInputs, err := r.watchInputs(ctx, ctrl)
	if err != nil {
		return err
	}
	defer stopInputs()
	if err := r.followAll(ctx); err != nil {
		return err
	}
	close(r.ready)
	r.log.Info("shadow pod workers running", zap.String("runtime", rt.Type()), zap.Int("partitions", r.common.Partitions))
	<-ctx.Done()
	r.stopAll()
	return nil
}

// followAll acquires every partition (a shadow's acquire: its own
// consumers, no requests served), trying again until it can or ctx ends.
func (r *Runner) followAll(ctx context.Context) error {
	for p := 0; p < r.common.Partitions; p++ {
		for {
			err := r.acquire(ctx, p)
			if err == nil {
				break
			}
			r.log.Warn("shadow: cannot follow a partition yet", zap.Int("partition", p), zap.Error(err))
			select {
			case <-ctx.Done():
				r.stopAll()
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
	}
	return nil
}

// stopAll stops the shadow's consumers of every partition.
func (r *Runner) stopAll() {
	r.mu.Lock()
	parts := r.parts
	r.parts = map[int]*partition{}
	r.mu.Unlock()
	for p, part := range parts {
		r.stopPartition(p, part, false)
	}
}

// mirrorLive feeds rt the live pod workers' statuses (podstatus.*, all
// the stream holds, then as they come) and returns once it has read what
// the stream held when it began, so that the shadow's workers find the
// containers the live ones run before they decide anything.
func (r *Runner) mirrorLive(ctx context.Context, rt *shadowrt.Runtime) (func(), error) {
	stream, err := r.js.Stream(ctx, bus.StreamName(r.common.NodeName, bus.StreamPodStatus))
	if err != nil {
		return nil, fmt.Errorf("shadow: podstatus stream: %w", err)
	}
	last := stream.CachedInfo().State.LastSeq
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{r.subjects.PodStatusAll()},
		DeliverPolicy: jetstream.DeliverAllPolicy, NamePrefix: bus.OrderedName(bus.ShadowIdentity("podworkers-live"))})
	if err != nil {
		return nil, fmt.Errorf("shadow: reading the live statuses: %w", err)
	}
	caught := make(chan struct{})
	var once sync.Once
	if last == 0 {
		once.Do(func() { close(caught) })
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if e, err := bus.Decode(m.Data()); err == nil {
			if st, err := bus.DecodePodRuntimeStatus(e); err == nil {
				rt.Observe(st)
			} else {
				r.log.Debug("shadow: dropping a malformed live status", zap.String(logging.FieldSubject, m.Subject()), zap.Error(err))
			}
		}
		if md, err := m.Metadata(); err == nil && (md.Sequence.Stream >= last || md.NumPending == 0) {
			once.Do(func() { close(caught) })
		}
	})
	if err != nil {
		return nil, err
	}
	select {
	case <-caught:
		return cc.Stop, nil
	case <-ctx.Done():
		cc.Stop()
		return nil, ctx.Err()
	}
}

// shadowRecorder is a shadow pod worker's Event recorder: a shadow writes
// nothing to the API server, so each Event the live pod workers would
// record goes out as a ShadowEvent on shadow.podworkers.events.<p> instead
// (the partition of the object's UID), published without waiting for the
// stream (a pod worker does not wait on its Events either).
type shadowRecorder struct {
	log        *zap.Logger
	pub        *bus.Publisher
	subjects   bus.Subjects
	partitions int
}

func (s shadowRecorder) Event(o runtime.Object, eventtype, reason, message string) {
	ev := &bus.ShadowEvent{Type: eventtype, Reason: reason, Message: message}
	switch obj := o.(type) {
	case *corev1.Pod:
		ev.Object, ev.Namespace, ev.Name, ev.UID = "Pod", obj.Namespace, obj.Name, obj.UID
	case *corev1.Node:
		ev.Object, ev.Name, ev.UID = "Node", obj.Name, obj.UID
	case *corev1.ObjectReference:
		ev.Object, ev.Namespace, ev.Name, ev.UID = obj.Kind, obj.Namespace, obj.Name, obj.UID
	default:
		ev.Object = fmt.Sprintf("%T", o)
	}
	if ev.Name == "" {
		ev.Name = ev.Object
	}
	subject := s.subjects.ShadowEvents(bus.Partition(string(ev.UID), s.partitions))
	if _, err := s.pub.PublishAsync(context.Background(), subject, bus.KindShadowEvent, "", ev); err != nil {
		s.log.Debug("shadow: cannot publish an Event", zap.String("reason", reason), zap.String(logging.FieldSubject, subject), zap.Error(err))
	}
}

func (s shadowRecorder) Eventf(o runtime.Object, eventtype, reason, format string, args ...any) {
	s.Event(o, eventtype, reason, fmt.Sprintf(format, args...))
}

func (s shadowRecorder) AnnotatedEventf(o runtime.Object, _ map[string]string, eventtype, reason, format string, args ...any) {
	s.Eventf(o, eventtype, reason, format, args...)
}
