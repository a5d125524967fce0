// Package statuspub publishes pods' runtime status on the bus, coalesced per
// pod: the newest status of each pod replaces any not yet sent, a short
// window gathers a burst of changes into one message per pod, and a status
// equal to the last one sent is not sent again.
package statuspub

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/tracing"
)

// DefaultWindow is how long changes gather before they go out.
const DefaultWindow = 50 * time.Millisecond

// Publisher coalesces and publishes PodRuntimeStatus messages.
type Publisher struct {
	pub        *bus.Publisher
	subjects   bus.Subjects
	partitions int
	window     time.Duration
	log        *zap.Logger
	// owned says whether this replica may speak for a partition now.
	owned func(p int) bool

	mu     sync.Mutex
	latest map[types.UID]*bus.PodRuntimeStatus
	sent   map[types.UID]*bus.PodRuntimeStatus
	dirty  map[types.UID]struct{}
	// forget: pods to drop once their last status has gone out.
	forget map[types.UID]struct{}
	// closed: partitions handed over; what their workers still say is
	// dropped until the partition is opened again (acquired).
	closed map[int]bool
	kick   chan struct{}
	sentN  int
	traces *tracing.Pods
	// scratch: same's encoding buffers (under mu).
	scratch [2][]byte
}

// SetSubjects sets where the statuses go (before Run): a shadow pod
// worker's under its shadow prefix (default: the node's own subjects).
func (p *Publisher) SetSubjects(s bus.Subjects) { p.subjects = s }

// SetTraces gives the pods' trace contexts that their statuses carry (before Run).
func (p *Publisher) SetTraces(t *tracing.Pods) { p.traces = t }

// New returns a publisher; owned gates which partitions it speaks for.
func New(pub *bus.Publisher, partitions int, owned func(int) bool, log *zap.Logger) *Publisher {
	return &Publisher{
		pub: pub, subjects: bus.For(pub.Node()), partitions: partitions, window: DefaultWindow, log: log, owned: owned,
		latest: map[types.UID]*bus.PodRuntimeStatus{}, sent: map[types.UID]*bus.PodRuntimeStatus{},
		dirty: map[types.UID]struct{}{}, forget: map[types.UID]struct{}{}, closed: map[int]bool{}, kick: make(chan struct{}, 1),
	}
}

// SetWindow sets the coalescing window (before Run).
func (p *Publisher) SetWindow(d time.Duration) {
	if d > 0 {
		p.window = d
	}
}

// Set records a pod's newest status.
func (p *Publisher) Set(st *bus.PodRuntimeStatus) {
	p.mu.Lock()
	if p.closed[bus.Partition(string(st.UID), p.partitions)] {
		// said after the hand-over (a worker still finishing the kill of a
		// process-local hand-over): the next owner speaks for the pod, and
		// if this replica takes the partition back later, a status held
		// from then (a pod killed and terminated) would overwrite the truth.
		p.mu.Unlock()
		return
	}
	if old, ok := p.latest[st.UID]; ok && p.same(old, st) {
		p.mu.Unlock()
		return
	}
	p.latest[st.UID] = st
	p.dirty[st.UID] = struct{}{}
	delete(p.forget, st.UID)
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Store publishes a pod's status now and returns once the stream has
// stored it (an eviction is recorded before it acts); it then stands as the
// pod's newest status, as after Set and a flush.
func (p *Publisher) Store(ctx context.Context, st *bus.PodRuntimeStatus) error {
	p.mu.Lock()
	if p.closed[bus.Partition(string(st.UID), p.partitions)] {
		p.mu.Unlock()
		return fmt.Errorf("partition of pod %s handed over", st.UID)
	}
	p.latest[st.UID] = st
	delete(p.dirty, st.UID)
	p.mu.Unlock()
	acked, errs := p.publish(ctx, []*bus.PodRuntimeStatus{st})
	p.mu.Lock()
	defer p.mu.Unlock()
	if !acked[0] {
		if p.latest[st.UID] == st {
			p.dirty[st.UID] = struct{}{}
		}
		return errors.Join(errs...)
	}
	p.sent[st.UID] = st
	p.sentN++
	return nil
}

// same reports whether two statuses of a pod say the same, by their
// protobuf forms (a reflective comparison cost a tenth of the pod workers'
// CPU in a deletion burst); a status that cannot be encoded is compared by
// reflection. Call with p.mu held: it uses the publisher's scratch buffers.
func (p *Publisher) same(a, b *bus.PodRuntimeStatus) bool {
	eq, err := a.SameAs(b, &p.scratch)
	if err != nil {
		return apiequality.Semantic.DeepEqual(a, b)
	}
	return eq
}

// Forget drops a pod, once its newest status has gone out.
func (p *Publisher) Forget(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, pending := p.dirty[uid]; pending {
		p.forget[uid] = struct{}{}
		return
	}
	p.drop(uid)
}

func (p *Publisher) drop(uid types.UID) {
	delete(p.latest, uid)
	delete(p.sent, uid)
	delete(p.dirty, uid)
	delete(p.forget, uid)
}

func (p *Publisher) dropIfForgotten(uid types.UID) {
	if _, ok := p.forget[uid]; ok {
		p.drop(uid)
	}
}

// Open starts this publisher's part in partition part (the replica is
// taking it over): statuses of its pods are taken from now on, and nothing
// held from an earlier ownership is left to go out.
func (p *Publisher) Open(part int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.closed, part)
	for uid := range p.latest {
		if bus.Partition(string(uid), p.partitions) == part {
			p.drop(uid)
		}
	}
}

// HandOver ends this publisher's part in partition part: with publish, the
// statuses of its pods not yet sent go out now (the replica still holds the
// lease, and the next owner starts from them); then every status of the
// partition is dropped, and the partition is closed: statuses of its pods
// set later are dropped too, until Open.
func (p *Publisher) HandOver(ctx context.Context, part int, publish bool) error {
	p.mu.Lock()
	var batch []*bus.PodRuntimeStatus
	for uid, st := range p.latest {
		if bus.Partition(string(uid), p.partitions) != part {
			continue
		}
		if _, dirty := p.dirty[uid]; dirty && publish {
			if old, ok := p.sent[uid]; !ok || !p.same(old, st) {
				batch = append(batch, st)
			}
		}
		p.drop(uid)
	}
	p.closed[part] = true
	p.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	acked, errs := p.publish(ctx, batch)
	p.mu.Lock()
	for _, ok := range acked {
		if ok {
			p.sentN++
		}
	}
	p.mu.Unlock()
	return errors.Join(errs...)
}

// publish sends a batch of statuses and waits (within ctx) for the
// stream's acknowledgements; acked[i] says whether batch[i] was stored.
// Each status counts as sent only when its own publish was acknowledged:
// completion of the batch says nothing of a publish that failed (a
// timeout, a stream error).
func (p *Publisher) publish(ctx context.Context, batch []*bus.PodRuntimeStatus) (acked []bool, errs []error) {
	acks := make([]jetstream.PubAckFuture, len(batch))
	for i, st := range batch {
		subj := p.subjects.PodStatus(bus.Partition(string(st.UID), p.partitions))
		// the status carries the trace of the sync that made it, if any.
		f, err := p.pub.PublishAsync(p.traces.Context(ctx, string(st.UID)), subj, bus.KindPodRuntimeStatus, "", st)
		if err != nil {
			p.log.Warn("cannot publish pod status", append(logging.Pod(st.Namespace, st.Name, string(st.UID)), zap.String(logging.FieldSubject, subj), zap.Error(err))...)
			errs = append(errs, err)
			continue
		}
		acks[i] = f
	}
	_ = p.pub.Flush(ctx)
	acked = make([]bool, len(batch))
	for i, f := range acks {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
			acked[i] = true
		case err := <-f.Err():
			st := batch[i]
			p.log.Warn("pod status not acknowledged", append(logging.Pod(st.Namespace, st.Name, string(st.UID)), zap.String(logging.FieldSubject, f.Msg().Subject), zap.Error(err))...)
			errs = append(errs, err)
		default:
			errs = append(errs, fmt.Errorf("status of pod %s: no acknowledgement: %w", batch[i].UID, context.DeadlineExceeded))
		}
	}
	return acked, errs
}

// Sent counts the messages published.
func (p *Publisher) Sent() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sentN
}

// Run publishes until ctx ends, then flushes what is pending.
func (p *Publisher) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			p.flush(fctx)
			cancel()
			return
		case <-p.kick:
		}
		t := time.NewTimer(p.window)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		p.flush(ctx)
	}
}

func (p *Publisher) flush(ctx context.Context) {
	p.mu.Lock()
	var batch []*bus.PodRuntimeStatus
	var skipped []types.UID
	for uid := range p.dirty {
		st := p.latest[uid]
		delete(p.dirty, uid)
		if st == nil {
			continue
		}
		if old, ok := p.sent[uid]; ok && p.same(old, st) {
			p.dropIfForgotten(uid)
			continue
		}
		if !p.owned(bus.Partition(string(uid), p.partitions)) {
			// kept until the partition is acquired or handed over.
			skipped = append(skipped, uid)
			continue
		}
		batch = append(batch, st)
	}
	for _, uid := range skipped {
		p.dirty[uid] = struct{}{}
	}
	p.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	acked, errs := p.publish(fctx, batch)
	cancel()
	failures := len(errs) // each is retried with the next flush
	p.mu.Lock()
	for i, st := range batch {
		if acked[i] {
			p.sent[st.UID] = st
			p.sentN++
			if _, again := p.dirty[st.UID]; !again {
				p.dropIfForgotten(st.UID)
			}
		} else if p.latest[st.UID] == st {
			p.dirty[st.UID] = struct{}{}
		}
	}
	p.mu.Unlock()
	if failures > 0 {
		select {
		case p.kick <- struct{}{}:
		default:
		}
		if ctx.Err() == nil {
			t := time.NewTimer(time.Second)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
}
