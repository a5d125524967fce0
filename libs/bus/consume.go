package bus

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/splitlet/splitlet/libs/tracing"
)

// MaxPanicDeliveries bounds how often a message whose handler panicked is
// delivered: after that many panics it is terminated, so one poisonous
// message can neither crash a stage nor hold its consumer forever.
const MaxPanicDeliveries = 5

// How a durable consumer redelivers a message whose handler returned an
// error (docs/bus.md, "Delivery and ordering"): after DefaultRetryDelay,
// then twice as long each time up to DefaultMaxRetryDelay, and at most
// DefaultMaxDeliveries times in all; then the message is terminated and
// what it carried is recovered from the next snapshot or the stream, tried
// every DefaultRecoverEvery.
const (
	DefaultMaxDeliveries = 10
	DefaultRetryDelay    = time.Second
	DefaultMaxRetryDelay = 30 * time.Second
	DefaultRecoverEvery  = 30 * time.Second
)

// Handler processes one decoded message. Returning nil acknowledges it; an
// error has it delivered again after a delay, a bounded number of times.
type Handler func(ctx context.Context, subject string, e *Envelope) error

// ConsumerOptions describe a durable consumer of one stream.
type ConsumerOptions struct {
	// Stream is the stream name (see StreamName).
	Stream string
	// Durable names the consumer; a restarted stage with the same name
	// resumes where it left off.
	Durable string
	// Filters restrict the consumer to some subjects of the stream.
	Filters []string
	// DeliverPolicy for a consumer that does not exist yet (default: all).
	DeliverPolicy jetstream.DeliverPolicy
	// AckWait before an unacknowledged message is sent again (default 30 s).
	AckWait time.Duration
	// MaxAckPending bounds messages in flight (default 1000).
	MaxAckPending int
	// RetryDelay before the first redelivery of a message whose handler
	// failed; each further one waits twice as long as the one before, up
	// to MaxRetryDelay (defaults DefaultRetryDelay, DefaultMaxRetryDelay).
	RetryDelay    time.Duration
	MaxRetryDelay time.Duration
	// MaxDeliveries of a message whose handler returns an error; at the
	// last it is terminated (default DefaultMaxDeliveries). The server
	// stops delivering at twice as many (the consumer's MaxDeliver), a
	// backstop for a stage that dies on a message before it can answer.
	MaxDeliveries int
	// RecoverEvery: how often what terminated messages left undone is
	// tried again from the stream (default DefaultRecoverEvery).
	RecoverEvery time.Duration
	// InactiveThreshold removes a durable consumer left unused that long
	// (default: never).
	InactiveThreshold time.Duration
	// OrderedByHandler: the handler orders messages itself (per pod), so a
	// message that newer ones of its subject overtook, a redelivery after
	// the consumer's server was lost, is passed on instead of being taken
	// for one already seen. Fit for kinds of one pod a message
	// (PodRuntimeStatus), which the receiver orders per pod.
	OrderedByHandler bool
	Logger           *zap.Logger
	// Metrics count the consumer's deliveries, panics and terminations
	// (nil: counted nowhere).
	Metrics *Metrics
}

// withDefaults fills in the options left zero.
func (o ConsumerOptions) withDefaults() ConsumerOptions {
	o.AckWait = or(o.AckWait, 30*time.Second)
	o.MaxAckPending = or(o.MaxAckPending, 1000)
	o.RetryDelay = or(o.RetryDelay, DefaultRetryDelay)
	o.MaxRetryDelay = max(or(o.MaxRetryDelay, DefaultMaxRetryDelay), o.RetryDelay)
	o.MaxDeliveries = or(o.MaxDeliveries, DefaultMaxDeliveries)
	o.RecoverEvery = or(o.RecoverEvery, DefaultRecoverEvery)
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	o.Metrics = o.Metrics.orUnregistered()
	return o
}

// Consume runs handler on every new message of a durable consumer, one at a
// time, in stream order. Messages that do not decode are logged and
// terminated (never redelivered); messages seen before (by Seq) are
// acknowledged without calling the handler. A message whose handler returns
// an error is delivered again after a growing delay, MaxDeliveries times at
// most; one whose handler panics (logged, counted in
// Metrics.HandlerPanics; the process goes on) MaxPanicDeliveries times.
// Then it is terminated, logged with its subject, stream sequence and pods,
// counted in Metrics.HandlerTerminations, and its pods are marked: a pod
// update is settled by the next snapshot (SET) of its source and partition,
// any other message is fetched from the stream and handed to the handler
// again every RecoverEvery until that succeeds or a newer message about the
// same pod does. Stop it with the returned function, which waits for the
// message in hand.
func Consume(ctx context.Context, js jetstream.JetStream, opts ConsumerOptions, handler Handler) (stop func(), err error) {
	if opts.Stream == "" || opts.Durable == "" {
		return nil, errors.New("bus: consumer needs a stream and a durable name")
	}
	opts = opts.withDefaults()
	cons, err := js.CreateOrUpdateConsumer(ctx, opts.Stream, jetstream.ConsumerConfig{
		Durable:        opts.Durable,
		FilterSubjects: opts.Filters,
		AckPolicy:      jetstream.AckExplicitPolicy,
		DeliverPolicy:  opts.DeliverPolicy,
		AckWait:        opts.AckWait,
		MaxAckPending:  opts.MaxAckPending,
		// an existing consumer made without a bound is updated in place:
		// it keeps its position and what it has pending.
		MaxDeliver:        serverMaxDeliver(opts.MaxDeliveries),
		InactiveThreshold: opts.InactiveThreshold,
	})
	if err != nil {
		return nil, fmt.Errorf("bus: consumer %s on %s: %w", opts.Durable, opts.Stream, err)
	}
	c := &consumer{opts: opts, js: js, log: opts.Logger, handler: handler, marks: newUnsettled(),
		rcv: newReceiver(opts.Stream, opts.Durable, !opts.OrderedByHandler, opts.Logger, opts.Metrics, handler)}
	hctx, cancel := context.WithCancel(ctx)
	var inflight sync.WaitGroup
	cc, err := cons.Consume(func(m jetstream.Msg) {
		inflight.Add(1)
		defer inflight.Done()
		c.handle(hctx, m)
	}, consumeErrors(hctx, c.log, "consumer", opts.Durable))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("bus: consume %s: %w", opts.Durable, err)
	}
	recovered := make(chan struct{})
	go func() {
		defer close(recovered)
		c.recoverLoop(hctx)
	}()
	untrack := track(js, opts.Stream, opts.Durable, cons)
	return func() {
		untrack()
		cc.Drain()
		<-cc.Closed()
		cancel()
		inflight.Wait()
		<-recovered
	}, nil
}

// serverMaxDeliver is the consumer's MaxDeliver for a client bound of
// maxDeliveries: twice as many, so that the client's termination (logged,
// counted, marked) always comes first, and deliveries a stage killed with
// messages in hand used up do not make the server drop one unseen.
func serverMaxDeliver(maxDeliveries int) int {
	return 2 * max(maxDeliveries, MaxPanicDeliveries)
}

// consumer is one running Consume.
type consumer struct {
	opts    ConsumerOptions
	js      jetstream.JetStream
	log     *zap.Logger
	handler Handler
	rcv     *receiver
	marks   *unsettled
	// hmu: one handler call at a time, the consumer's or the recovery's.
	hmu sync.Mutex
}

// handle settles one delivered message.
func (c *consumer) handle(ctx context.Context, m jetstream.Msg) {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	switch v, e, f := c.rcv.receive(ctx, m); v {
	case verdictDone:
		if e != nil {
			c.marks.settle(m.Subject(), e, c.log)
		}
		_ = m.Ack()
	case verdictMalformed:
		_ = m.Term()
	case verdictPanic, verdictRetry:
		c.failed(ctx, m, v, e, f)
	}
}

// failed has a message whose handler failed delivered again after a
// growing delay, or terminates it once it has had its deliveries.
func (c *consumer) failed(ctx context.Context, m jetstream.Msg, v verdict, e *Envelope, f []zap.Field) {
	var delivered, seq uint64
	if md, err := m.Metadata(); err == nil {
		delivered, seq = md.NumDelivered, md.Sequence.Stream
	}
	limit := uint64(c.opts.MaxDeliveries)
	if v == verdictPanic {
		limit = MaxPanicDeliveries
	}
	f = append(f, zap.String("consumer", c.opts.Durable), zap.Uint64("delivered", delivered))
	if delivered >= limit && ctx.Err() == nil {
		f = append(f, podFields(e)...)
		c.log.Error("message handler failed on every delivery; terminating the message, its pods are recovered from the next snapshot or the stream", f...)
		c.opts.Metrics.HandlerTerminations.WithLabelValues(c.opts.Durable).Inc()
		c.marks.mark(m.Subject(), seq, e)
		_ = m.TermWithReason("handler failed " + fmt.Sprint(delivered) + " times")
		return
	}
	delay := backoff(c.opts.RetryDelay, c.opts.MaxRetryDelay, delivered)
	f = append(f, zap.Duration("retryIn", delay))
	switch {
	case v == verdictPanic:
		c.log.Error("message handler panicked; will retry", f...)
	case ctx.Err() == nil:
		c.log.Warn("message handling failed, will retry", f...)
	}
	_ = m.NakWithDelay(delay)
}

// backoff is the wait before the next delivery of a message delivered so
// far delivered times: first, doubled each time, at most limit.
func backoff(first, limit time.Duration, delivered uint64) time.Duration {
	d := first
	for i := uint64(1); i < delivered && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// safely runs the handler, turning a panic into an error (with the panic's
// value and stack) and panicked = true.
func safely(ctx context.Context, h Handler, subject string, e *Envelope) (panicked bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			panicked = true
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return false, h(ctx, subject, e)
}

// consumeErrors logs what goes wrong under a consumer while it runs (a
// missed heartbeat is repaired by the client and not worth a line).
func consumeErrors(ctx context.Context, log *zap.Logger, what, name string) jetstream.PullConsumeOpt {
	return jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if ctx.Err() == nil && !errors.Is(err, jetstream.ErrNoHeartbeat) {
			log.Warn(what+" error", zap.String(what, name), zap.Error(err))
		}
	})
}

// verdict is what became of one message in a receiver's hands.
type verdict int

const (
	// verdictDone: handled, or seen before; not to be delivered again.
	verdictDone verdict = iota
	// verdictMalformed: it does not decode; never to be delivered again.
	verdictMalformed
	// verdictRetry: the handler returned an error; deliver it again.
	verdictRetry
	// verdictPanic: the handler panicked; deliver it again, a bounded
	// number of times.
	verdictPanic
)

// receiver is what Consume and Follow do alike with each message: decode
// it, skip what was seen before (unless the handler orders), observe the
// delivery time and run the handler without letting a panic out.
type receiver struct {
	name     string
	log      *zap.Logger
	dedup    *Dedup
	delivery prometheus.Observer
	panics   prometheus.Counter
	handler  Handler
}

func newReceiver(stream, name string, dedup bool, log *zap.Logger, m *Metrics, h Handler) *receiver {
	r := &receiver{name: name, log: log, delivery: m.BusDelivery.WithLabelValues(streamLabel(stream)),
		panics: m.HandlerPanics.WithLabelValues(name), handler: h}
	if dedup {
		r.dedup = NewDedup()
	}
	return r
}

// receive hands one message to the handler. It returns the envelope when
// the handler ran (nil for a message skipped or malformed), and for a retry
// or a panic the log fields that describe the message and the failure.
func (r *receiver) receive(ctx context.Context, m jetstream.Msg) (verdict, *Envelope, []zap.Field) {
	subject := m.Subject()
	e, err := DecodeMsg(m.Headers(), m.Data())
	if err != nil {
		r.log.Error("dropping malformed message", zap.String("subject", subject), zap.Error(err))
		return verdictMalformed, nil, nil
	}
	if r.dedup != nil && !r.dedup.Accept(subject, e) {
		return verdictDone, nil, nil
	}
	r.delivery.Observe(max(time.Since(e.SentAt), 0).Seconds())
	panicked, err := safely(tracing.Extract(ctx, m.Headers()), r.handler, subject, e)
	if err == nil {
		return verdictDone, e, nil
	}
	if r.dedup != nil {
		r.dedup.Forget(subject, e)
	}
	var seq uint64
	if md, merr := m.Metadata(); merr == nil {
		seq = md.Sequence.Stream
	}
	f := []zap.Field{zap.String("subject", subject), zap.Uint64("streamSeq", seq), zap.String("source", e.Source),
		zap.Uint64("seq", e.Seq), zap.Error(err)}
	if panicked {
		r.panics.Inc()
		return verdictPanic, e, f
	}
	return verdictRetry, e, f
}

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Dedup remembers the last sequence number accepted from each source on each
// subject and rejects anything not newer.
type Dedup struct {
	mu   sync.Mutex
	last map[dedupKey]uint64
	prev map[dedupKey]uint64
}

type dedupKey struct{ subject, source string }

// NewDedup returns an empty tracker.
func NewDedup() *Dedup {
	return &Dedup{last: map[dedupKey]uint64{}, prev: map[dedupKey]uint64{}}
}

// Accept reports whether e is newer than anything accepted before from its
// source on the subject, and records it if so.
func (d *Dedup) Accept(subject string, e *Envelope) bool {
	k := dedupKey{subject, e.Source}
	d.mu.Lock()
	defer d.mu.Unlock()
	if e.Seq <= d.last[k] {
		return false
	}
	d.prev[k] = d.last[k]
	d.last[k] = e.Seq
	return true
}

// Forget undoes the last Accept of e, so that its redelivery is taken.
func (d *Dedup) Forget(subject string, e *Envelope) {
	k := dedupKey{subject, e.Source}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last[k] == e.Seq {
		d.last[k] = d.prev[k]
	}
}

// PodOrder is where one pod's runtime statuses stand: the envelope source
// and seq of the last one taken. PodRuntimeStatus is ordered per pod, not
// by its subject (docs/bus.md): a status is stale only when its source
// already sent a newer one for the same pod. The zero value takes anything.
type PodOrder struct {
	Source string
	Seq    uint64
}

// Take reports whether a status from source with seq comes after o, and if
// so moves o to it. Seq 0 (not ordered) is taken and leaves o as it was.
func (o *PodOrder) Take(source string, seq uint64) bool {
	if seq == 0 {
		return true
	}
	if o.Source == source && seq <= o.Seq {
		return false
	}
	o.Source, o.Seq = source, seq
	return true
}
