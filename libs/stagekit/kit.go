// Package stagekit is what a stage that follows the node's pods needs from
// the bus (docs/bus.md): it consumes podupdates.<p> and podstatus.<p> with
// the contract's ordering, keeps the set of pods the sources list, and hands
// the stage's own callbacks each pod added, updated and removed and each
// runtime status. The prober and examples/tcpprober are built on it; a Go
// stage that takes the prober's place on the bus can be too.
//
// Ordering, as the contract has it: a pod update whose seq is not above the
// last one its source sent on the subject is dropped (bus.Consume); a SET
// (or a SET sent in SETPARTs, put back together by bus.Snapshots) replaces
// its source's pods of the partition; a snapshot with a part missing is
// dropped, and the source's next periodic SET brings the set back in line.
// Runtime statuses are handed on in stream order with their source and seq,
// for the stage to order per pod (bus.PodOrder).
package stagekit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/logging"
)

// PodHandler is the stage's side of the pod set. The kit calls it from one
// goroutine at a time, in the order of the pod updates.
type PodHandler interface {
	// PodAdded: a pod new to the set (ADD, UPDATE, DELETE or a SET).
	PodAdded(source string, pod *corev1.Pod)
	// PodUpdated: a pod of the set sent again (its spec, labels,
	// annotations or deletion fields may have changed).
	PodUpdated(source string, pod *corev1.Pod)
	// PodRemoved: a pod gone (REMOVE, or left out of its source's SET of
	// its partition). A REMOVE is handed on even for a pod the set never
	// held, so that what the stage keeps of it (a status) goes too.
	PodRemoved(uid types.UID)
}

// StatusHandler takes the pods' runtime statuses (podstatus.<p>), in
// stream order. They are ordered per pod, not by subject (docs/bus.md): the
// stage drops a status whose seq is not above its pod's last from the same
// source (bus.PodOrder).
type StatusHandler interface {
	PodStatus(ctx context.Context, source string, seq uint64, st *bus.PodRuntimeStatus)
}

// ConsumerHook may change a consumer's options and wrap its handler (tests).
type ConsumerHook func(*bus.ConsumerOptions, bus.Handler) bus.Handler

// shadowInactive is how long a shadow's durables outlive the shadow: an
// experiment that ended leaves nothing on the server for long.
const shadowInactive = time.Hour

// Kit consumes a node's pod updates (and runtime statuses) for one stage.
type Kit struct {
	js       jetstream.JetStream
	node     string
	subjects bus.Subjects
	pods     PodHandler
	status   StatusHandler
	log      *zap.Logger
	metrics  *bus.Metrics
	replicas int
	shadow   bool
	durables durables
	retry    time.Duration
	hook     ConsumerHook
	decode   bus.PodDecoder

	set *podSet

	mu      sync.Mutex
	stops   []func()
	reset   bool // the durables were deleted, so the streams are read from their start
	ready   bool
	lastErr error
	cancel  context.CancelFunc
	done    chan struct{}
}

type durables struct{ podUpdates, podStatus string }

// New returns a kit for the node's bus that hands pod changes to pods. It
// consumes nothing before Start.
func New(js jetstream.JetStream, node string, pods PodHandler, opts ...Option) *Kit {
	k := &Kit{
		js:       js,
		node:     node,
		subjects: bus.For(node),
		pods:     pods,
		log:      zap.NewNop(),
		durables: durables{bus.DurableProberPodUpdates, bus.DurableProberPodStatus},
		retry:    500 * time.Millisecond,
	}
	for _, o := range opts {
		o(k)
	}
	if k.shadow {
		k.durables = durables{bus.ShadowDurable(k.durables.podUpdates), bus.ShadowDurable(k.durables.podStatus)}
	}
	k.set = newPodSet(pods, k.decode, k.log)
	return k
}

// Start returns at once; the consumers are set up in the background,
// retried until the bus is there.
func (k *Kit) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	k.cancel, k.done = cancel, make(chan struct{})
	go func() {
		defer close(k.done)
		k.subscribe(ctx)
	}()
}

// Ready reports whether the kit consumes the bus.
func (k *Kit) Ready() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ready {
		return nil
	}
	if k.lastErr != nil {
		return fmt.Errorf("not consuming the bus: %w", k.lastErr)
	}
	return errors.New("not consuming the bus yet")
}

// Stop ends the consumers, each after the message in hand; no callback is
// called once it returns.
func (k *Kit) Stop() {
	if k.cancel == nil {
		return // never started
	}
	k.stopConsumers()
	k.cancel()
	<-k.done
	k.stopConsumers() // those the subscriber set up while Stop began
}

func (k *Kit) stopConsumers() {
	k.mu.Lock()
	stops := k.stops
	k.stops = nil
	k.mu.Unlock()
	for _, s := range stops {
		s()
	}
}

// subscribe sets up the consumers, retrying until it succeeds or ctx ends.
func (k *Kit) subscribe(ctx context.Context) {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		err := k.trySubscribe(ctx)
		k.mu.Lock()
		k.ready, k.lastErr = err == nil, err
		k.mu.Unlock()
		if err == nil {
			k.log.Info("consuming pod updates and pod status", zap.String("durable", k.durables.podUpdates),
				zap.String("statusDurable", k.durables.podStatus), zap.Bool("shadow", k.shadow))
			return
		}
		if attempt%10 == 0 {
			k.log.Warn("cannot consume the bus yet, retrying", zap.Error(err))
		}
		select {
		case <-ctx.Done():
		case <-time.After(k.retry):
		}
	}
}

// consumer is one of the kit's consumers and its handler.
type consumer struct {
	opts    bus.ConsumerOptions
	handler bus.Handler
}

// consumers are the kit's consumers in the order they are set up: the
// statuses first, so that a pod's status is there when its spec comes.
func (k *Kit) consumers() []consumer {
	var cs []consumer
	if k.status != nil {
		cs = append(cs, consumer{bus.ConsumerOptions{
			Stream:  bus.StreamName(k.node, bus.StreamPodStatus),
			Durable: k.durables.podStatus,
			Filters: []string{k.subjects.PodStatusAll()},
			// one pod a message: the stage orders statuses per pod, so one
			// redelivered behind another pod's newer status is taken.
			OrderedByHandler: true,
		}, k.handleStatus})
	}
	return append(cs, consumer{bus.ConsumerOptions{
		Stream:  bus.StreamName(k.node, bus.StreamPodUpdates),
		Durable: k.durables.podUpdates,
		// podupdates.* only: the server keeps the reconciles
		// (podupdates.reconcile.<p>, for the partition's owner) away.
		Filters: []string{k.subjects.PodUpdatesAll()},
	}, k.set.handlePodUpdate})
}

func (k *Kit) trySubscribe(ctx context.Context) error {
	if err := bus.EnsureStreamsReplicas(ctx, k.js, k.node, k.replicas); err != nil {
		return err
	}
	if k.shadow {
		if err := bus.EnsureShadowStream(ctx, k.js, k.node, k.replicas); err != nil {
			return err
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	cs := k.consumers()
	if err := k.resetOnce(ctx, cs); err != nil {
		return err
	}
	for _, c := range cs[len(k.stops):] {
		opts, h := c.opts, c.handler
		opts.Logger, opts.Metrics = k.log, k.metrics
		if k.shadow {
			opts.InactiveThreshold = shadowInactive
		}
		if k.hook != nil {
			h = k.hook(&opts, h)
		}
		stop, err := bus.Consume(ctx, k.js, opts, h)
		if err != nil {
			return err
		}
		k.stops = append(k.stops, stop)
	}
	return nil
}

// resetOnce deletes the durables the first time: the pod set lives in
// memory, so each start reads the streams' whole history again instead of
// resuming where the last run stopped (a resumed consumer would not bring
// back pods and statuses that did not change since). k.mu is held.
func (k *Kit) resetOnce(ctx context.Context, cs []consumer) error {
	if k.reset {
		return nil
	}
	for _, c := range cs {
		if err := k.js.DeleteConsumer(ctx, c.opts.Stream, c.opts.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("reset consumer %s: %w", c.opts.Durable, err)
		}
	}
	k.reset = true
	return nil
}

func (k *Kit) handleStatus(ctx context.Context, subject string, e *bus.Envelope) error {
	st, err := bus.DecodePodRuntimeStatus(e)
	if err != nil {
		// A payload that does not decode will not decode next time either.
		k.log.Error("dropping a pod status that does not decode", zap.String(logging.FieldSubject, subject), zap.Error(err))
		return nil
	}
	k.status.PodStatus(ctx, e.Source, e.Seq, st)
	return nil
}
