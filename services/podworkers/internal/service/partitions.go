package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/tracing"
	"github.com/splitlet/splitlet/services/podworkers/internal/podsync"
)

func labelsEverything() labels.Selector { return labels.Everything() }

// Durable consumer names shared by the replicas (docs/bus.md).
func updatesDurable(p int) string { return fmt.Sprintf("podworkers-p%d", p) }
func probesDurable(p int) string  { return fmt.Sprintf("podworkers-probes-p%d", p) }

// consumerAckWait is short so that the messages a crashed owner held are
// redelivered, in order, before the next owner takes the partition (the
// lease TTL is longer).
const consumerAckWait = 5 * time.Second

// acquire takes a partition over: it rebuilds the partition's desired pods
// from the stream up to where the previous owner stopped, tells a runtime
// that must be told (runtime.Restorer) what the partition's pods last ran,
// makes a runtime that polls (runtime.Relister) read its containers now,
// hands the pods to the controller (their workers adopt what the runtime
// holds: nothing that runs is restarted), from then on lets housekeeping
// look for the partition's runtime orphans, then resumes the shared durable
// consumers and answers the partition's runtime requests.
func (r *Runner) acquire(ctx context.Context, p int) error {
	r.mu.Lock()
	ctrl, rt, pub, sink := r.ctrl, r.rt, r.pub, r.sink
	r.mu.Unlock()
	log := r.log.With(zap.Int("partition", p))
	// nothing this replica said of the partition's pods before (when it
	// last owned it) may go out now: the pods' truth is rebuilt below.
	sink.Open(p)
	r.setActive(p, true)
	state, err := r.replay(ctx, p)
	if err == nil {
		err = r.restore(ctx, p, state)
	}
	if err == nil {
		err = r.relist(ctx, p, rt)
	}
	if err != nil {
		r.setActive(p, false)
		return err
	}
	r.handDesired(p, state)
	r.setAdopted(p)
	pctx, cancel := context.WithCancel(context.Background())
	part := &partition{cancel: cancel}
	fail := func(err error) error {
		r.stopPartition(p, part, false)
		r.setActive(p, false)
		return err
	}
	node := r.common.NodeName
	stop, err := bus.Consume(ctx, r.conn.JS, bus.ConsumerOptions{
		Stream:  bus.StreamName(node, bus.StreamPodUpdates),
		Durable: updatesDurable(p),
		// the partition's pod updates and its reconciles (their own
		// subject since contract v2), in stream order: the op is read
		// from each envelope. (A durable consumer a v1 replica made with
		// the first filter alone is updated to both.)
		Filters: r.subjects.PartitionPodUpdates(p),
		AckWait: consumerAckWait,
		Logger:  log,
	}, func(mctx context.Context, subject string, e *bus.Envelope) error {
		u, err := bus.DecodePodUpdate(e)
		if err != nil {
			log.Error("dropping malformed pod update", zap.String(logging.FieldSubject, subject), zap.Error(err))
			return nil
		}
		busPodView(u.Pods)
		if r.traces != nil {
			for i := range u.Pods {
				r.traces.Remember(mctx, string(u.Pods[i].UID))
			}
		}
		op, pods, apply := r.snapshots.Resolve(subject, e, u)
		if !apply {
			return nil
		}
		return r.gated(p, func() { ctrl.HandleUpdate(e.Source, op, p, pods) })
	})
	if err != nil {
		return fail(err)
	}
	part.stops = append(part.stops, stop)
	stop, err = bus.Consume(ctx, r.conn.JS, bus.ConsumerOptions{
		Stream:        bus.StreamName(node, bus.StreamProbes),
		Durable:       probesDurable(p),
		Filters:       []string{r.subjects.ProbeResults(p)},
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckWait:       consumerAckWait,
		Logger:        log,
	}, func(mctx context.Context, subject string, e *bus.Envelope) error {
		pr, err := bus.DecodeProbeResult(e)
		if err != nil {
			log.Error("dropping malformed probe result", zap.String(logging.FieldSubject, subject), zap.Error(err))
			return nil
		}
		r.traces.Remember(mctx, string(pr.PodUID))
		return r.gated(p, func() { ctrl.HandleProbe(pr) })
	})
	if err != nil {
		return fail(err)
	}
	part.stops = append(part.stops, stop)
	// A handler that panics answers the requester with an error of the
	// kind it waits for, and the stage goes on.
	serve := func(subject string, h func(context.Context, *nats.Msg), kind bus.Kind, failure func(string) any) error {
		sub, err := r.conn.NC.Subscribe(subject, func(m *nats.Msg) {
			part.reqs.Add(1)
			go func() {
				defer part.reqs.Done()
				rctx, span := r.requestSpan(pctx, m)
				err := bus.Recover(r.log, "podworkers-requests", m.Subject, func() { h(rctx, m) })
				tracing.End(span, err)
				if err != nil && m.Reply != "" {
					_ = pub.Send(m.Reply, kind, failure(err.Error()))
				}
			}()
		})
		if err != nil {
			return err
		}
		part.subs = append(part.subs, sub)
		return nil
	}
	for _, s := range []struct {
		subject string
		h       func(context.Context, *nats.Msg)
		kind    bus.Kind
		failure func(string) any
	}{
		{r.subjects.Logs(p), func(ctx context.Context, m *nats.Msg) { r.serveLogs(ctx, rt, pub, m) },
			bus.KindLogsChunk, func(e string) any { return &bus.LogsChunk{EOF: true, Error: e} }},
		{r.subjects.Exec(p), func(ctx context.Context, m *nats.Msg) { r.serveExec(ctx, rt, pub, m) },
			bus.KindExecResult, func(e string) any { return &bus.ExecResult{ExitCode: -1, Error: e} }},
		{r.subjects.Stats(p), func(ctx context.Context, m *nats.Msg) { r.serveStats(rt, pub, p, m) },
			bus.KindStatsResult, func(e string) any { return &bus.StatsResult{Error: e} }},
		{r.subjects.Stream(p), func(ctx context.Context, m *nats.Msg) { r.serveStream(ctx, rt, pub, m) },
			bus.KindStreamResult, func(e string) any { return &bus.StreamResult{Error: e} }},
	} {
		if err := serve(s.subject, s.h, s.kind, s.failure); err != nil {
			return fail(err)
		}
	}
	r.mu.Lock()
	r.parts[p] = part
	r.mu.Unlock()
	return nil
}

// errReleased sends a message back to the stream: the partition has moved.
var errReleased = errors.New("partition released by this replica")

// gated applies a message of partition p unless p was released.
func (r *Runner) gated(p int, apply func()) error {
	r.gates[p].RLock()
	defer r.gates[p].RUnlock()
	if !r.isActive(p) {
		return errReleased
	}
	apply()
	return nil
}

// stopPartition stops a partition's consumers and request handlers. The
// consumers drain first, with the gate still open, so that every message
// already delivered to this replica is applied here (and covered by the
// handover) rather than refused and overtaken by newer ones at the next
// owner. A drain that hangs is abandoned after a while: the closed gate then
// refuses what it still delivers, and the stream redelivers it. With fence
// (the lease is lost: another replica may own the partition soon) the gate
// closes first, and nothing more is applied here.
func (r *Runner) stopPartition(p int, part *partition, fence bool) {
	if fence {
		r.gates[p].Lock()
		r.setActive(p, false)
		r.gates[p].Unlock()
	}
	for _, s := range part.subs {
		_ = s.Unsubscribe()
	}
	stopped := make(chan struct{})
	start := time.Now()
	go func() {
		for _, stop := range part.stops {
			stop()
		}
		close(stopped)
	}()
	select {
	case <-stopped:
		r.log.Debug("partition consumers drained", zap.Int("partition", p), zap.Duration("took", time.Since(start)))
	case <-time.After(consumerDrainTimeout):
		r.log.Warn("partition consumers still draining, handing over anyway", zap.Int("partition", p))
	}
	r.gates[p].Lock()
	r.setActive(p, false)
	r.gates[p].Unlock()
	part.cancel()
	part.reqs.Wait()
}

// consumerDrainTimeout bounds how long a handover waits for the consumers.
const consumerDrainTimeout = 5 * time.Second

// release stops consuming a partition and hands its pods over: their
// workers stop, their containers go on running (a process-local runtime's
// are stopped), and, unless the lease is lost, their current statuses go
// out as this replica's last word. A runtime that was told what ran
// (runtime.Restorer) forgets the partition's pods: the next owner restores
// them from those statuses.
func (r *Runner) release(ctx context.Context, p int, lost bool) {
	r.mu.Lock()
	part := r.parts[p]
	delete(r.parts, p)
	ctrl, rt, sink := r.ctrl, r.rt, r.sink
	r.mu.Unlock()
	if part != nil {
		r.stopPartition(p, part, lost)
	}
	// from now on the next owner speaks for the partition's pods.
	r.gates[p].Lock()
	r.setActive(p, false)
	r.gates[p].Unlock()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := ctrl.ReleasePartition(rctx, p); err != nil {
		r.log.Warn("partition released with pod workers still stopping", zap.Int("partition", p), zap.Error(err))
	}
	_, local := rt.(runtime.ProcessLocal)
	if err := sink.HandOver(rctx, p, !lost && !local); err != nil {
		r.log.Warn("cannot publish the last statuses of a released partition", zap.Int("partition", p), zap.Error(err))
	}
	if rs, ok := rt.(runtime.Restorer); ok {
		if lister, ok := rt.(runtime.PodLister); ok {
			for _, ref := range lister.Pods() {
				if bus.Partition(string(ref.UID), r.common.Partitions) == p {
					rs.Forget(ref.UID)
				}
			}
		}
	}
}

// relist makes a runtime that polls for its containers (runtime.Relister)
// read them now, so that the partition's pods adopt the containers and
// sandboxes the previous owner started since the runtime's last poll
// instead of starting them again.
func (r *Runner) relist(ctx context.Context, p int, rt runtime.Runtime) error {
	rl, ok := rt.(runtime.Relister)
	if !ok {
		return nil
	}
	if err := rl.Relist(ctx); err != nil {
		return fmt.Errorf("partition %d: read the runtime's containers: %w", p, err)
	}
	return nil
}

// handDesired gives the controller the desired pods replay rebuilt.
func (r *Runner) handDesired(p int, state map[string]map[types.UID]corev1.Pod) {
	for source, pods := range state {
		list := make([]corev1.Pod, 0, len(pods))
		for _, pod := range pods {
			list = append(list, pod)
		}
		if len(list) > 0 {
			r.ctrl.HandleUpdate(source, bus.OpAdd, p, list)
		}
	}
}

// restore tells a runtime that keeps nothing of its own (runtime.Restorer)
// what the partition's pods last ran, from the last status of each pod on
// the podstatus stream, before any of them syncs. Pods reported terminated
// that no source wants are gone and stay so; pods no source wants that
// still ran are restored too, and housekeeping removes them.
func (r *Runner) restore(ctx context.Context, p int, state map[string]map[types.UID]corev1.Pod) error {
	rs, ok := r.rt.(runtime.Restorer)
	if !ok {
		return nil
	}
	statuses, err := r.lastStatuses(ctx, p)
	if err != nil {
		return fmt.Errorf("partition %d: last pod statuses: %w", p, err)
	}
	desired := map[types.UID]*corev1.Pod{}
	for _, pods := range state {
		for uid := range pods {
			pod := pods[uid]
			desired[uid] = &pod
		}
	}
	n := 0
	for uid, st := range statuses {
		pod, want := desired[uid]
		if !want {
			if st.Terminated {
				continue
			}
			pod = &corev1.Pod{}
			pod.UID, pod.Namespace, pod.Name = uid, st.Namespace, st.Name
		}
		if err := rs.Restore(pod, podsync.Instances(st)); err != nil {
			r.log.Warn("cannot restore pod into the runtime", append(logging.Pod(st.Namespace, st.Name, string(uid)), zap.Error(err))...)
			continue
		}
		n++
	}
	r.log.Info("partition's pods restored into the runtime from their last statuses", zap.Int("partition", p), zap.Int("pods", n))
	return nil
}

// lastStatuses reads the partition's podstatus subject and keeps the last
// status of each pod.
func (r *Runner) lastStatuses(ctx context.Context, p int) (map[types.UID]*bus.PodRuntimeStatus, error) {
	out := map[types.UID]*bus.PodRuntimeStatus{}
	subject := r.subjects.PodStatus(p)
	stream, err := r.conn.JS.Stream(ctx, bus.StreamName(r.common.NodeName, bus.StreamPodStatus))
	if err != nil {
		return nil, err
	}
	last, err := stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	oc, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, err
	}
	for {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := oc.Next(jetstream.FetchContext(fctx))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("reading %s: %w", subject, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return nil, err
		}
		if e, err := bus.Decode(m.Data()); err == nil {
			if st, err := bus.DecodePodRuntimeStatus(e); err == nil {
				out[st.UID] = st
			}
		}
		if md.Sequence.Stream >= last.Sequence {
			return out, nil
		}
	}
}

// replay folds the partition's pod updates that the previous owner
// acknowledged into the desired pods, and hands them to the controller, so
// that the next message the durable consumer delivers applies on top of
// the state it was sent after (per-pod order across a handover).
func (r *Runner) replay(ctx context.Context, p int) (map[string]map[types.UID]corev1.Pod, error) {
	// per source, the pods it wants.
	state := map[string]map[types.UID]corev1.Pod{}
	stream := bus.StreamName(r.common.NodeName, bus.StreamPodUpdates)
	c, err := r.conn.JS.Consumer(ctx, stream, updatesDurable(p))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return state, nil // first owner ever: the durable consumer starts at the beginning
	}
	if err != nil {
		return nil, fmt.Errorf("partition %d: consumer info: %w", p, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("partition %d: consumer info: %w", p, err)
	}
	floor := info.AckFloor.Stream
	if floor == 0 {
		return state, nil
	}
	// the durable consumer's subjects: its ack floor may be a reconcile's
	// sequence, and a reconcile sets its pod like an update.
	oc, err := r.conn.JS.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: r.subjects.PartitionPodUpdates(p),
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("partition %d: replay: %w", p, err)
	}
	n := 0
	for {
		fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := oc.Next(jetstream.FetchContext(fctx))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			// nothing left below the floor (older messages aged out).
			break
		}
		md, err := m.Metadata()
		if err != nil {
			continue
		}
		if md.Sequence.Stream > floor {
			break
		}
		n++
		e, err := bus.Decode(m.Data())
		if err != nil {
			continue
		}
		u, err := bus.DecodePodUpdate(e)
		if err != nil {
			continue
		}
		busPodView(u.Pods)
		src := state[e.Source]
		if src == nil || e.Op == bus.OpSet {
			// a SET replaces the source's pods of this partition.
			src = map[types.UID]corev1.Pod{}
			state[e.Source] = src
		}
		for _, pod := range u.Pods {
			if e.Op == bus.OpRemove {
				delete(src, pod.UID)
			} else {
				src[pod.UID] = pod
			}
		}
		if md.Sequence.Stream == floor {
			break
		}
	}
	total := 0
	for _, pods := range state {
		total += len(pods)
	}
	r.log.Info("partition state rebuilt from the stream", zap.Int("partition", p), zap.Int("messages", n), zap.Int("pods", total), zap.Uint64("ackFloor", floor))
	return state, nil
}

// caughtUp says whether the partition's durable consumer has delivered and
// seen acknowledged every pod update published so far.
func (r *Runner) caughtUp(ctx context.Context, p int) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := r.conn.JS.Consumer(ctx, bus.StreamName(r.common.NodeName, bus.StreamPodUpdates), updatesDurable(p))
	if err != nil {
		return false
	}
	info, err := c.Info(ctx)
	return err == nil && info.NumPending == 0 && info.NumAckPending == 0
}

func (r *Runner) serveLogs(ctx context.Context, rt runtime.Runtime, pub *bus.Publisher, m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	e, err := bus.Decode(m.Data)
	var req *bus.LogsRequest
	if err == nil {
		req, err = bus.DecodeLogsRequest(e)
	}
	if err != nil {
		_ = pub.SendChunkError(ctx, m.Reply, err)
		return
	}
	opts := runtime.LogOptions{Follow: req.Follow, Previous: req.Previous, Timestamps: req.Timestamps, TailLines: -1}
	if req.TailLines != nil {
		opts.TailLines = *req.TailLines
	}
	if req.LimitBytes != nil {
		opts.LimitBytes = *req.LimitBytes
	}
	if req.SinceSeconds != nil {
		opts.Since = time.Now().Add(-time.Duration(*req.SinceSeconds) * time.Second)
	}
	if req.SinceTime != nil {
		opts.Since = req.SinceTime.Time
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(rt.Logs(lctx, req.PodUID, req.Container, opts, pw))
	}()
	if err := pub.StreamChunks(lctx, m.Reply, pr); err != nil && lctx.Err() == nil {
		r.log.Debug("log stream ended", append(logging.Pod(req.Namespace, req.Pod, string(req.PodUID)), zap.Error(err))...)
	}
	cancel()
	_ = pr.Close()
}

func (r *Runner) serveExec(ctx context.Context, rt runtime.Runtime, pub *bus.Publisher, m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	e, err := bus.Decode(m.Data)
	var req *bus.ExecRequest
	if err == nil {
		req, err = bus.DecodeExecRequest(e)
	}
	if err != nil {
		_ = pub.Send(m.Reply, bus.KindExecResult, &bus.ExecResult{ExitCode: -1, Error: err.Error()})
		return
	}
	timeout := time.Duration(req.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = time.Minute
	}
	res, err := rt.Exec(ctx, req.PodUID, req.Container, req.Command, bytes.NewReader(req.Stdin), timeout)
	out := &bus.ExecResult{Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: res.ExitCode}
	if err != nil {
		out.Error = err.Error()
	}
	if err := pub.Send(m.Reply, bus.KindExecResult, out); err != nil {
		r.log.Warn("cannot answer exec", zap.Error(err))
	}
}

// serveStream answers a StreamRequest with the URL of the runtime's
// streaming server (kubelet: GetExec asks the CRI runtime for it), or says
// that the runtime has none.
func (r *Runner) serveStream(ctx context.Context, rt runtime.Runtime, pub *bus.Publisher, m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	e, err := bus.Decode(m.Data)
	var req *bus.StreamRequest
	if err == nil {
		req, err = bus.DecodeStreamRequest(e)
	}
	out := &bus.StreamResult{}
	if err != nil {
		out.Error = err.Error()
	} else if st, ok := rt.(runtime.Streamer); !ok {
		out.Unsupported = true
		what := "tty"
		if req.Attach {
			what = "attach"
		}
		out.Error = fmt.Sprintf("%s: not supported by the %s runtime", what, rt.Type())
	} else {
		rctx, cancel := context.WithTimeout(ctx, streamURLTimeout)
		if req.Attach {
			out.URL, err = st.AttachURL(rctx, req.PodUID, req.Container, req.TTY, req.Stdin, req.Stdout, req.Stderr)
		} else {
			out.URL, err = st.ExecURL(rctx, req.PodUID, req.Container, req.Command, req.TTY, req.Stdin, req.Stdout, req.Stderr)
		}
		cancel()
		if err != nil {
			out.Error = err.Error()
		}
	}
	if err := pub.Send(m.Reply, bus.KindStreamResult, out); err != nil {
		r.log.Warn("cannot answer a stream request", zap.Error(err))
	}
}

// streamURLTimeout bounds the runtime's Exec call (it only hands out a URL).
const streamURLTimeout = 10 * time.Second

func (r *Runner) serveStats(rt runtime.Runtime, pub *bus.Publisher, p int, m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	res := &bus.StatsResult{Pods: []bus.PodStats{}}
	for _, pod := range r.Controller().PodsOf(p) {
		cs := rt.Stats(pod.UID)
		if len(cs) == 0 {
			continue
		}
		ps := bus.PodStats{UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name}
		for _, c := range cs {
			if ps.StartTime.IsZero() || c.StartedAt.Before(ps.StartTime.Time) {
				ps.StartTime = metav1.NewTime(c.StartedAt)
			}
			ps.Containers = append(ps.Containers, bus.ContainerStats{Name: c.Name, StartTime: metav1.NewTime(c.StartedAt),
				CPUUsageNanoCores: c.CPUUsageNanoCores, CPUUsageCoreNanoSecs: c.CPUUsageCoreNanoSecs, MemoryWorkingSetBytes: c.MemoryWorkingSetBytes})
		}
		res.Pods = append(res.Pods, ps)
	}
	if err := pub.Send(m.Reply, bus.KindStatsResult, res); err != nil {
		r.log.Warn("cannot answer stats", zap.Error(err))
	}
}

// requestSpan opens the span of a runtime request (logs, exec, ...) that
// carries a trace context (the kubelet API's, from an API server that
// traces); other requests get a span that records nothing.
func (r *Runner) requestSpan(ctx context.Context, m *nats.Msg) (context.Context, trace.Span) {
	ctx = tracing.Extract(ctx, m.Header)
	if r.tracer == nil || !tracing.Traced(ctx) {
		return ctx, trace.SpanFromContext(context.Background())
	}
	// runtime.<request>.<partition>: the span is named by the request.
	tokens := strings.Split(m.Subject, ".")
	request := tokens[max(len(tokens)-2, 0)]
	return r.tracer.Start(ctx, "podworkers "+request, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(tracing.AttrStage.String("podworkers"), attribute.String("messaging.destination.name", m.Subject)))
}
