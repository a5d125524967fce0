package service

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/tracing"
)

// outbox publishes probe results in the order they come, one publisher
// goroutine for all workers. Results for one (pod, container, probe type)
// that have not gone out yet are coalesced to the newest: the bus carries
// state, and the newest state is what counts. A publish that fails is
// retried unless a newer result for the key has come.
type outbox struct {
	pub        *bus.Publisher
	subjects   bus.Subjects
	partitions int
	log        *zap.Logger
	// tracer and traces: a result of a traced pod is a span of its trace.
	tracer trace.Tracer
	traces *tracing.Pods

	mu      sync.Mutex
	pending map[outKey]bus.ProbeResult
	order   []outKey
	wake    chan struct{}
}

type outKey struct {
	uid       types.UID
	container string
	probe     bus.ProbeType
}

// publishBatch bounds the asynchronous publishes in flight.
const publishBatch = 1000

func newOutbox(pub *bus.Publisher, subjects bus.Subjects, partitions int, log *zap.Logger) *outbox {
	return &outbox{pub: pub, subjects: subjects, partitions: partitions, log: log,
		pending: map[outKey]bus.ProbeResult{}, wake: make(chan struct{}, 1)}
}

// put queues a result; it never blocks.
func (o *outbox) put(r bus.ProbeResult) {
	k := outKey{r.PodUID, r.Container, r.Probe}
	o.mu.Lock()
	if _, ok := o.pending[k]; !ok {
		o.order = append(o.order, k)
	}
	o.pending[k] = r
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

func (o *outbox) take(n int) []bus.ProbeResult {
	o.mu.Lock()
	defer o.mu.Unlock()
	if n > len(o.order) {
		n = len(o.order)
	}
	out := make([]bus.ProbeResult, 0, n)
	for _, k := range o.order[:n] {
		out = append(out, o.pending[k])
		delete(o.pending, k)
	}
	o.order = o.order[n:]
	return out
}

// requeue puts back a result that failed to go out, unless a newer one
// for its key is already waiting.
func (o *outbox) requeue(r bus.ProbeResult) {
	k := outKey{r.PodUID, r.Container, r.Probe}
	o.mu.Lock()
	if _, newer := o.pending[k]; !newer {
		o.pending[k] = r
		o.order = append([]outKey{k}, o.order...)
	}
	o.mu.Unlock()
}

func (o *outbox) empty() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.order) == 0
}

// run publishes until ctx ends; then it goes on sending what is left for
// at most drain.
func (o *outbox) run(ctx context.Context, drain time.Duration) {
	for {
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), drain)
			defer cancel()
			for !o.empty() && dctx.Err() == nil {
				if !o.flushOnce(dctx) {
					break
				}
			}
			return
		case <-o.wake:
		}
		for !o.empty() && ctx.Err() == nil {
			if !o.flushOnce(ctx) {
				// The bus is not taking messages: back off a little.
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}
	}
}

// flushOnce sends one batch and waits for its acknowledgements; false if
// any failed (they are queued again).
func (o *outbox) flushOnce(ctx context.Context) bool {
	batch := o.take(publishBatch)
	type sent struct {
		r bus.ProbeResult
		f jetstream.PubAckFuture
	}
	futures := make([]sent, 0, len(batch))
	ok := true
	for _, r := range batch {
		subject := o.subjects.ProbeResults(bus.Partition(string(r.PodUID), o.partitions))
		f, err := o.pub.PublishAsync(o.trace(ctx, &r), subject, bus.KindProbeResult, "", &r)
		if err != nil {
			o.log.Warn("cannot publish probe result", append(logging.Pod(r.Namespace, r.Name, string(r.PodUID)),
				zap.String(logging.FieldSubject, subject), zap.Error(err))...)
			o.requeue(r)
			ok = false
			continue
		}
		futures = append(futures, sent{r, f})
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, s := range futures {
		select {
		case <-s.f.Ok():
		case err := <-s.f.Err():
			o.log.Warn("probe result not stored, will retry", append(logging.Pod(s.r.Namespace, s.r.Name, string(s.r.PodUID)), zap.Error(err))...)
			o.requeue(s.r)
			ok = false
		case <-wctx.Done():
			o.requeue(s.r)
			ok = false
		}
	}
	return ok
}

// trace opens and closes the span of a result of a traced pod, the parent
// of the result's message; ctx is returned unchanged for other pods.
func (o *outbox) trace(ctx context.Context, r *bus.ProbeResult) context.Context {
	if o.tracer == nil {
		return ctx
	}
	uid := string(r.PodUID)
	pctx := o.traces.Context(ctx, uid)
	if !tracing.Traced(pctx) {
		return ctx
	}
	pctx, span := o.tracer.Start(pctx, "prober "+string(r.Probe)+" "+string(r.Result), tracing.PodAttributes(r.Namespace, r.Name, uid),
		trace.WithAttributes(tracing.AttrStage.String("prober"), attribute.String("k8s.container.name", r.Container)))
	span.End()
	return pctx
}
