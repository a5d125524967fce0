// Package controller runs podconfig's merge loop: the sources report into a
// queue, one goroutine merges every report into the storage in arrival
// order and publishes the resulting PodUpdates on the bus, batched per
// (source, partition); it also publishes SourcesReady, StaticPods and the
// periodic SET snapshots, and tells the mirror pod manager what the static
// pods are.
package controller

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/tracing"
	"github.com/splitlet/splitlet/services/podconfig/internal/merge"
)

// SourceName is the envelope source of podconfig's own messages (SourcesReady).
const SourceName = "podconfig"

// maxPodsPerMessage bounds the pods of one ADD/UPDATE/... message; a SET
// always carries its whole partition.
const maxPodsPerMessage = 200

// StaticSink is told the static pods (file and http sources) after each
// change, and whether every static source has been seen in full.
type StaticSink interface {
	SetStatic(pods []*corev1.Pod, allSeen bool)
}

// Option configures a Controller.
type Option func(*Controller)

// WithLogger sets the logger.
func WithLogger(l *zap.Logger) Option { return func(c *Controller) { c.log = l } }

// WithSnapshotPeriod sets how often every seen source's pods are re-sent as SETs.
func WithSnapshotPeriod(d time.Duration) Option { return func(c *Controller) { c.snapshotPeriod = d } }

// WithStorage sets the pod storage (default: incremental mode).
func WithStorage(s *merge.Storage) Option { return func(c *Controller) { c.storage = s } }

// WithStaticPodPath names the file source's path in StaticPods (what the
// node's /configz states as staticPodPath).
func WithStaticPodPath(path string) Option { return func(c *Controller) { c.staticPath = path } }

// WithStaticSink sets who learns the static pods (the mirror pod manager).
func WithStaticSink(s StaticSink) Option { return func(c *Controller) { c.static = s } }

// WithWaitReady sets what Run waits for before publishing (the bus streams).
func WithWaitReady(f func(context.Context) error) Option {
	return func(c *Controller) { c.waitReady = f }
}

// WithRegisterer registers the controller's metrics.
func WithRegisterer(r prometheus.Registerer) Option { return func(c *Controller) { c.reg = r } }

// WithBusMetrics has the controller observe each new pod's time in
// podconfig in m (the process's bus metrics).
func WithBusMetrics(m *bus.Metrics) Option { return func(c *Controller) { c.busMetrics = m } }

// WithPublisherOptions configures the controller's bus publishers (their
// encoding).
func WithPublisherOptions(o ...bus.PublisherOption) Option {
	return func(c *Controller) { c.pubOpts = append(c.pubOpts, o...) }
}

// WithTracer has each pod of an ADD, UPDATE, DELETE or REMOVE open a trace
// (libs/tracing) that its message carries on; nil or a no-op tracer: none.
func WithTracer(t trace.Tracer) Option { return func(c *Controller) { c.tracer = t } }

// Controller is the merge loop. Build it with New, register sources with
// AddSource before Run, and feed it with Submit.
type Controller struct {
	node           string
	partitions     int
	nc             *nats.Conn
	js             jetstream.JetStream
	log            *zap.Logger
	storage        *merge.Storage
	static         StaticSink
	staticPath     string
	snapshotPeriod time.Duration
	// lastSnapshotPods: the pods the last periodic snapshot sent.
	lastSnapshotPods int
	waitReady        func(context.Context) error
	reg              prometheus.Registerer
	busMetrics       *bus.Metrics
	subjects         bus.Subjects
	tracer           trace.Tracer

	mu      sync.Mutex
	queue   []merge.Update
	signal  chan struct{}
	sources []string

	pubs     map[string]*bus.Publisher
	ready    *bus.Publisher
	dirty    map[partKey]bool
	running  chan struct{}
	seenAll  chan struct{}
	seenOnce sync.Once
	// staticSent: the static sink has been told the static pods once.
	staticSent bool
	// readyDirty: SourcesReady is to be (re)published.
	readyDirty bool
	// staticDirty: StaticPods is to be (re)published once every static
	// source has been seen.
	staticDirty bool

	pubOpts   []bus.PublisherOption
	published *prometheus.CounterVec
	failures  prometheus.Counter
}

type partKey struct {
	source string
	part   int
}

// New builds a controller publishing for node over nc.
func New(nc *nats.Conn, node string, partitions int, opts ...Option) (*Controller, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1024), jetstream.WithPublishAsyncTimeout(15*time.Second))
	if err != nil {
		return nil, err
	}
	c := &Controller{
		node: node, partitions: partitions, nc: nc, js: js, log: zap.NewNop(),
		snapshotPeriod: 30 * time.Second, subjects: bus.For(node),
		signal: make(chan struct{}, 1), pubs: map[string]*bus.Publisher{},
		dirty: map[partKey]bool{}, running: make(chan struct{}), seenAll: make(chan struct{}),
	}
	for _, o := range opts {
		o(c)
	}
	if c.storage == nil {
		c.storage = merge.New(partitions)
	}
	c.ready = bus.NewPublisher(nc, js, node, SourceName, c.pubOpts...)
	c.published = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "splitlet_podconfig_pod_updates_published_total",
		Help: "PodUpdate messages published, by pod source and operation.",
	}, []string{"source", "op"})
	c.failures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "splitlet_podconfig_publish_failures_total",
		Help: "PodUpdate messages the bus did not acknowledge (their partition is re-sent as a SET).",
	})
	if c.reg != nil {
		for _, m := range []prometheus.Collector{c.published, c.failures} {
			if err := c.reg.Register(m); err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}

// SetStaticSink sets who learns the static pods; call it before Run.
func (c *Controller) SetStaticSink(s StaticSink) { c.static = s }

// Storage is the controller's pod storage.
func (c *Controller) Storage() *merge.Storage { return c.storage }

// AddSource registers a configured source; call it before Run.
func (c *Controller) AddSource(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Contains(c.sources, name) {
		c.sources = append(c.sources, name)
		slices.Sort(c.sources)
	}
	c.pubs[name] = bus.NewPublisher(c.nc, c.js, c.node, name, c.pubOpts...)
}

// Submit queues a source's report. It never blocks.
func (c *Controller) Submit(u merge.Update) {
	c.mu.Lock()
	c.queue = append(c.queue, u)
	c.mu.Unlock()
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

// AllSeen is closed once every configured source has been seen in full.
func (c *Controller) AllSeen() <-chan struct{} { return c.seenAll }

// Run merges and publishes until ctx ends; then it publishes what is queued
// (for at most 5 s) and returns.
func (c *Controller) Run(ctx context.Context) {
	if c.waitReady != nil {
		if err := c.waitReady(ctx); err != nil {
			return
		}
	}
	c.readyDirty = true // say which sources run, none seen yet
	c.staticDirty = true
	tick := time.NewTimer(c.snapshotPeriod)
	defer tick.Stop()
	var retry <-chan time.Time
	if !c.cycle(ctx, false) {
		retry = time.After(time.Second)
	}
	for {
		snapshot := false
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			c.cycle(dctx, false)
			cancel()
			return
		case <-c.signal:
		case <-tick.C:
			snapshot = true
		case <-retry:
			retry = nil
		}
		if !c.cycle(ctx, snapshot) && retry == nil {
			retry = time.After(time.Second)
		}
		if snapshot {
			tick.Reset(snapshotSpacing(c.snapshotPeriod, c.lastSnapshotPods))
		}
	}
}

// SnapshotPodsPerSecond bounds what the periodic snapshots re-send on
// average: on a node with more pods than the period allows at that rate,
// the snapshots are spaced further apart, so that their cost per second
// stays flat and a node's whole cost grows with its pods, not with their
// square (docs/bench.md, large-node case).
const SnapshotPodsPerSecond = 100

// snapshotSpacing is the wait until the next periodic snapshot after one of
// pods pods: the configured period, or longer on a large node.
func snapshotSpacing(period time.Duration, pods int) time.Duration {
	return max(period, time.Duration(pods)*time.Second/SnapshotPodsPerSecond)
}

// cycle merges what is queued and publishes the outcome; false when some
// publish failed (the partitions concerned are re-sent as SETs later).
func (c *Controller) cycle(ctx context.Context, snapshot bool) bool {
	c.mu.Lock()
	queue := c.queue
	c.queue = nil
	sources := slices.Clone(c.sources)
	c.mu.Unlock()

	var b batch
	readyChanged, staticChanged := snapshot, false
	for _, u := range queue {
		res := c.storage.Merge(u)
		for _, m := range res.Messages {
			b.add(m)
		}
		if res.FirstSeen {
			readyChanged = true
			c.log.Info("pod source seen in full", zap.String("source", u.Source))
		}
		if u.Source != merge.SourceAPI && (len(res.Messages) > 0 || res.FirstSeen) {
			staticChanged = true
		}
	}
	for k := range c.dirty {
		// A source not seen yet keeps its mark until it is: a partial view
		// is never sent as a SET.
		if c.storage.Seen(k.source) {
			b.set(k.source, k.part, c.storage.Snapshot(k.source)[k.part])
			delete(c.dirty, k)
		}
	}
	if snapshot {
		c.lastSnapshotPods = 0
		for _, src := range sources {
			if !c.storage.Seen(src) {
				continue // a partial view must never be sent as a SET
			}
			for p, pods := range c.storage.Snapshot(src) {
				b.set(src, p, pods)
				c.lastSnapshotPods += len(pods)
			}
		}
	}
	ok := c.publish(ctx, b.msgs)
	if readyChanged || c.readyDirty {
		c.readyDirty = !c.publishReady(ctx)
		if c.readyDirty {
			ok = false
		}
	}
	if staticChanged || snapshot {
		c.staticDirty = true
	}
	if c.staticDirty && c.staticSeen(sources) {
		// Never a partial list: until every static source is seen, the
		// last value stands.
		c.staticDirty = !c.publishStatic(ctx)
		if c.staticDirty {
			ok = false
		}
	}
	if c.static != nil && (staticChanged || !c.staticSent) {
		// The first call also tells a node without static sources that
		// every mirror pod is an orphan.
		c.staticSent = true
		c.static.SetStatic(c.storage.Pods(merge.SourceFile, merge.SourceHTTP), c.staticSeen(sources))
	}
	return ok
}

func (c *Controller) staticSeen(sources []string) bool {
	for _, s := range sources {
		if s != merge.SourceAPI && !c.storage.Seen(s) {
			return false
		}
	}
	return true
}

type future struct {
	key partKey
	f   jetstream.PubAckFuture
}

// publish sends the messages asynchronously and waits for every
// acknowledgement; a partition whose message failed is marked for a SET.
func (c *Controller) publish(ctx context.Context, msgs []merge.Message) bool {
	if len(msgs) == 0 {
		return true
	}
	round := &publishRound{c: c, ctx: ctx, futures: make([]future, 0, len(msgs)), ok: true}
	for _, m := range msgs {
		round.send(m)
	}
	round.wait()
	return round.ok
}

// publishRound is one publish call: the acknowledgements it waits for and
// whether every message went out.
type publishRound struct {
	c       *Controller
	ctx     context.Context
	futures []future
	ok      bool
}

// fail marks k's partition for a SET.
func (p *publishRound) fail(k partKey, subject string, err error) {
	p.ok = false
	p.c.failures.Inc()
	p.c.dirty[k] = true
	p.c.log.Warn("pod update not published, its partition will be re-sent as a SET",
		zap.String(logging.FieldSubject, subject), zap.String("source", k.source), zap.Error(err))
}

// send publishes m; a message over the server's max_payload is split (a
// SET into parts of one set), or dropped when it holds one pod.
func (p *publishRound) send(m merge.Message) {
	c := p.c
	k := partKey{m.Source, m.Partition}
	// what only the partition's owner reads (merge marks it: RECONCILEs,
	// grace-shortening DELETEs) goes to the subject only the owner
	// consumes; both subjects are in the pod-updates stream, in order.
	subject := c.subjects.PodUpdates(m.Partition)
	if m.OwnerOnly {
		subject = c.subjects.PodReconciles(m.Partition)
	}
	f, err := c.publisher(m.Source).PublishAsync(c.traceMessage(p.ctx, m), subject, bus.KindPodUpdate, m.Op, &bus.PodUpdate{Pods: derefPods(m.Pods)})
	if errors.Is(err, nats.ErrMaxPayload) {
		p.sendTooLarge(k, subject, m)
		return
	}
	if err != nil {
		p.fail(k, subject, err)
		return
	}
	c.published.WithLabelValues(m.Source, string(m.Op)).Inc()
	if m.Op == bus.OpAdd {
		// a new pod's time in podconfig: from its first sight to this publish.
		now := time.Now()
		for _, pod := range m.Pods {
			if seen := bus.FirstSeen(pod); !seen.IsZero() {
				c.busMetrics.ObserveStage(bus.StagePodconfig, now.Sub(seen))
			}
		}
	}
	if ce := c.log.Check(zap.DebugLevel, "pod update"); ce != nil {
		ce.Write(zap.String(logging.FieldSubject, subject), zap.String("source", m.Source),
			zap.String("op", string(m.Op)), zap.Int("pods", len(m.Pods)))
	}
	p.futures = append(p.futures, future{k, f})
}

// sendTooLarge handles a message over the server's max_payload: halves of
// an update are sent apart, a SET goes in parts, and one pod too large is
// dropped.
func (p *publishRound) sendTooLarge(k partKey, subject string, m merge.Message) {
	c := p.c
	if m.Op != bus.OpSet && len(m.Pods) > 1 {
		half := len(m.Pods) / 2
		first, second := m, m
		first.Pods, second.Pods = m.Pods[:half], m.Pods[half:]
		p.send(first)
		p.send(second)
		return
	}
	if m.Op == bus.OpSet && len(m.Pods) > 1 {
		fs, err := c.publishSetParts(p.ctx, subject, m)
		for _, f := range fs {
			p.futures = append(p.futures, future{k, f})
		}
		if err != nil {
			p.fail(k, subject, err)
		}
		return
	}
	c.log.Error("pod update larger than the server's max_payload, dropped",
		zap.String(logging.FieldSubject, subject), zap.String("source", m.Source), zap.String("op", string(m.Op)),
		zap.Int("pods", len(m.Pods)), zap.Int64("maxPayload", c.nc.MaxPayload()))
}

// wait waits for every acknowledgement (or the context's end).
func (p *publishRound) wait() {
	for _, f := range p.futures {
		select {
		case <-f.f.Ok():
		case err := <-f.f.Err():
			p.fail(f.key, f.f.Msg().Subject, err)
		case <-p.ctx.Done():
			p.fail(f.key, f.f.Msg().Subject, p.ctx.Err())
		}
	}
}

// traceMessage opens each pod's span of a message (a new pod's from its
// first sight to this publish) and returns the context the message
// carries: the pod's own for one pod, each pod's (tracing.WithPods) for
// several. SETs and RECONCILEs are resyncs and open none.
func (c *Controller) traceMessage(ctx context.Context, m merge.Message) context.Context {
	if c.tracer == nil || m.Op == bus.OpSet || m.Op == bus.OpReconcile {
		return ctx
	}
	now := time.Now()
	name := "podconfig " + strings.ToLower(string(m.Op))
	var first context.Context
	var pods map[string]trace.SpanContext
	for _, p := range m.Pods {
		start := now
		if m.Op == bus.OpAdd {
			if seen := bus.FirstSeen(p); !seen.IsZero() {
				start = seen
			}
		}
		pctx, span := c.tracer.Start(ctx, name, trace.WithNewRoot(), trace.WithTimestamp(start),
			tracing.PodAttributes(p.Namespace, p.Name, string(p.UID)),
			trace.WithAttributes(tracing.AttrStage.String("podconfig"), tracing.AttrNode.String(c.node), attribute.String("splitlet.source", m.Source)))
		span.End(trace.WithTimestamp(now))
		if !span.SpanContext().IsSampled() {
			continue
		}
		if first == nil {
			first = pctx
		}
		if len(m.Pods) > 1 {
			if pods == nil {
				pods = map[string]trace.SpanContext{}
			}
			pods[string(p.UID)] = span.SpanContext()
		}
	}
	if first == nil {
		return ctx
	}
	return tracing.WithPods(first, pods)
}

// publishSetParts sends a SET too large for one message as SETPARTs of one
// snapshot (docs/bus.md), in twice as many parts as long as a part is still
// too large. A part left half-sent by a larger one is harmless: receivers
// drop a snapshot whose parts do not all follow in order.
func (c *Controller) publishSetParts(ctx context.Context, subject string, m merge.Message) ([]jetstream.PubAckFuture, error) {
	pub := c.publisher(m.Source)
	pods := derefPods(m.Pods)
	var futures []jetstream.PubAckFuture
	for n := 2; n <= len(pods); n *= 2 {
		id := strconv.FormatInt(time.Now().UnixNano(), 36)
		fits := true
		for _, part := range bus.SetParts(pods, n, id) {
			f, err := pub.PublishAsync(ctx, subject, bus.KindPodUpdate, bus.OpSetPart, &part)
			if errors.Is(err, nats.ErrMaxPayload) {
				fits = false
				break
			}
			if err != nil {
				return futures, err
			}
			futures = append(futures, f)
		}
		if fits {
			c.published.WithLabelValues(m.Source, string(bus.OpSetPart)).Add(float64(n))
			return futures, nil
		}
	}
	c.log.Error("a pod larger than the server's max_payload; the SET is dropped",
		zap.String(logging.FieldSubject, subject), zap.String("source", m.Source), zap.Int("pods", len(m.Pods)), zap.Int64("maxPayload", c.nc.MaxPayload()))
	return futures, nil
}

func (c *Controller) publisher(source string) *bus.Publisher {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pubs[source]
	if !ok {
		p = bus.NewPublisher(c.nc, c.js, c.node, source, c.pubOpts...)
		c.pubs[source] = p
	}
	return p
}

// publishReady sends the SourcesReady state (a JetStream publish, so the
// stream keeps the last value).
func (c *Controller) publishReady(ctx context.Context) bool {
	c.mu.Lock()
	sources := slices.Clone(c.sources)
	c.mu.Unlock()
	if sources == nil {
		sources = []string{}
	}
	ready := []string{}
	for _, s := range sources {
		if c.storage.Seen(s) {
			ready = append(ready, s)
		}
	}
	all := len(ready) == len(sources)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := c.ready.Publish(pctx, c.subjects.SourcesReady(), bus.KindSourcesReady, "",
		&bus.SourcesReady{Sources: sources, Ready: ready, AllReady: all})
	if err != nil {
		c.log.Warn("SourcesReady not published, will retry", zap.String(logging.FieldSubject, c.subjects.SourcesReady()), zap.Error(err))
		return false
	}
	if all {
		c.seenOnce.Do(func() { close(c.seenAll) })
	}
	return true
}

// publishStatic sends the static pods' UIDs and full names (StaticPods, a
// JetStream publish: the stream keeps the last value), by which a stage that
// meets a mirror pod in the API server tells which static pod it stands for.
func (c *Controller) publishStatic(ctx context.Context) bool {
	pods := c.storage.Pods(merge.SourceFile, merge.SourceHTTP)
	list := make([]bus.StaticPod, 0, len(pods))
	for _, p := range pods {
		list = append(list, bus.StaticPod{UID: p.UID, Namespace: p.Namespace, Name: p.Name})
	}
	slices.SortFunc(list, func(a, b bus.StaticPod) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.ready.Publish(pctx, c.subjects.StaticPods(), bus.KindStaticPods, "", &bus.StaticPods{Pods: list, Path: c.staticPath}); err != nil {
		c.log.Warn("StaticPods not published, will retry", zap.String(logging.FieldSubject, c.subjects.StaticPods()), zap.Error(err))
		return false
	}
	return true
}

func derefPods(in []*corev1.Pod) []corev1.Pod {
	out := make([]corev1.Pod, len(in))
	for i, p := range in {
		out[i] = *p
	}
	return out
}

// batch coalesces the messages of one cycle: consecutive operations of the
// same kind on one (source, partition) become one message, so the order of
// each pod's updates is kept while thousands of ADDs leave as a few messages.
type batch struct {
	msgs []merge.Message
	last map[partKey]int
}

func (b *batch) add(m merge.Message) {
	if b.last == nil {
		b.last = map[partKey]int{}
	}
	k := partKey{m.Source, m.Partition}
	if m.Op == bus.OpSet {
		b.last[k] = len(b.msgs)
		b.msgs = append(b.msgs, m)
		return
	}
	pods := m.Pods
	for len(pods) > 0 {
		i, ok := b.last[k]
		if !ok || b.msgs[i].Op != m.Op || b.msgs[i].OwnerOnly != m.OwnerOnly || len(b.msgs[i].Pods) >= maxPodsPerMessage {
			b.last[k] = len(b.msgs)
			empty := m
			empty.Pods = nil
			b.msgs = append(b.msgs, empty)
			i = b.last[k]
		}
		n := min(maxPodsPerMessage-len(b.msgs[i].Pods), len(pods))
		b.msgs[i].Pods = append(b.msgs[i].Pods, pods[:n]...)
		pods = pods[n:]
	}
}

func (b *batch) set(source string, part int, pods []*corev1.Pod) {
	if pods == nil {
		pods = []*corev1.Pod{}
	}
	b.add(merge.Message{Source: source, Op: bus.OpSet, Partition: part, Pods: pods})
}
