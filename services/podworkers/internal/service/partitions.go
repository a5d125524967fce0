package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/runtime"
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
// from the stream up to where the previous owner stopped, then resumes the
// shared durable consumers and answers the partition's runtime requests.
func (r *Runner) acquire(ctx context.Context, p int) error {
	r.mu.Lock()
	ctrl, rt, pub := r.ctrl, r.rt, r.pub
	r.mu.Unlock()
	log := r.log.With(zap.Int("partition", p))
	r.setActive(p, true)
	if err := r.replay(ctx, p); err != nil {
		r.setActive(p, false)
		return err
	}
	pctx, cancel := context.WithCancel(context.Background())
	part := &partition{cancel: cancel}
	fail := func(err error) error {
		r.stopPartition(p, part)
		r.setActive(p, false)
		return err
	}
	node := r.common.NodeName
	stop, err := bus.Consume(ctx, r.conn.JS, bus.ConsumerOptions{
		Stream:  bus.StreamName(node, bus.StreamPodUpdates),
		Durable: updatesDurable(p),
		Filters: []string{r.subjects.PodUpdates(p)},
		AckWait: consumerAckWait,
		Logger:  log,
	}, func(_ context.Context, subject string, e *bus.Envelope) error {
		u, err := bus.DecodePodUpdate(e)
		if err != nil {
			log.Error("dropping malformed pod update", zap.String(logging.FieldSubject, subject), zap.Error(err))
			return nil
		}
		return r.gated(p, func() { ctrl.HandleUpdate(e.Source, e.Op, p, u.Pods) })
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
	}, func(_ context.Context, subject string, e *bus.Envelope) error {
		pr, err := bus.DecodeProbeResult(e)
		if err != nil {
			log.Error("dropping malformed probe result", zap.String(logging.FieldSubject, subject), zap.Error(err))
			return nil
		}
		return r.gated(p, func() { ctrl.HandleProbe(pr) })
	})
	if err != nil {
		return fail(err)
	}
	part.stops = append(part.stops, stop)
	serve := func(subject string, h func(context.Context, *nats.Msg)) error {
		sub, err := r.conn.NC.Subscribe(subject, func(m *nats.Msg) {
			part.reqs.Add(1)
			go func() { defer part.reqs.Done(); h(pctx, m) }()
		})
		if err != nil {
			return err
		}
		part.subs = append(part.subs, sub)
		return nil
	}
	for subject, h := range map[string]func(context.Context, *nats.Msg){
		r.subjects.Logs(p):  func(ctx context.Context, m *nats.Msg) { r.serveLogs(ctx, rt, pub, m) },
		r.subjects.Exec(p):  func(ctx context.Context, m *nats.Msg) { r.serveExec(ctx, rt, pub, m) },
		r.subjects.Stats(p): func(ctx context.Context, m *nats.Msg) { r.serveStats(rt, pub, p, m) },
	} {
		if err := serve(subject, h); err != nil {
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
// refuses what it still delivers, and the stream redelivers it.
func (r *Runner) stopPartition(p int, part *partition) {
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

// release stops consuming a partition and stops its pods here.
func (r *Runner) release(ctx context.Context, p int) {
	r.mu.Lock()
	part := r.parts[p]
	delete(r.parts, p)
	ctrl := r.ctrl
	r.mu.Unlock()
	if part != nil {
		r.stopPartition(p, part)
	}
	// from now on the next owner speaks for the partition's pods.
	r.gates[p].Lock()
	r.setActive(p, false)
	r.gates[p].Unlock()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := ctrl.ReleasePartition(rctx, p); err != nil {
		r.log.Warn("partition released with pods still stopping", zap.Int("partition", p), zap.Error(err))
	}
}

// replay folds the partition's pod updates that the previous owner
// acknowledged into the desired pods, and hands them to the controller, so
// that the next message the durable consumer delivers applies on top of
// the state it was sent after (per-pod order across a handover).
func (r *Runner) replay(ctx context.Context, p int) error {
	stream := bus.StreamName(r.common.NodeName, bus.StreamPodUpdates)
	c, err := r.conn.JS.Consumer(ctx, stream, updatesDurable(p))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil // first owner ever: the durable consumer starts at the beginning
	}
	if err != nil {
		return fmt.Errorf("partition %d: consumer info: %w", p, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return fmt.Errorf("partition %d: consumer info: %w", p, err)
	}
	floor := info.AckFloor.Stream
	if floor == 0 {
		return nil
	}
	oc, err := r.conn.JS.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{r.subjects.PodUpdates(p)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("partition %d: replay: %w", p, err)
	}
	// per source, the pods it wants.
	state := map[string]map[types.UID]corev1.Pod{}
	n := 0
	for {
		fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := oc.Next(jetstream.FetchContext(fctx))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
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
	for source, pods := range state {
		list := make([]corev1.Pod, 0, len(pods))
		for _, pod := range pods {
			list = append(list, pod)
		}
		total += len(list)
		if len(list) > 0 {
			r.ctrl.HandleUpdate(source, bus.OpAdd, p, list)
		}
	}
	r.log.Info("partition state rebuilt from the stream", zap.Int("partition", p), zap.Int("messages", n), zap.Int("pods", total), zap.Uint64("ackFloor", floor))
	return nil
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
