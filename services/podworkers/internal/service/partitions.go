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
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/tracing"
	"github.com/splitlet/splitlet/services/podworkers/internal/controller"
	"github.com/splitlet/splitlet/services/podworkers/internal/podsync"
	"github.com/splitlet/splitlet/services/podworkers/internal/statuspub"
)

func labelsEverything() labels.Selector { return labels.Everything() }

// The names of a partition's followers of its pod updates and of its
// probe results (lag reports, metrics; docs/bus.md); a shadow's have its
// own (docs/bus.md, "Shadow stages").
func updatesFollower(p int) string { return fmt.Sprintf("podworkers-p%d", p) }
func probesFollower(p int) string  { return fmt.Sprintf("podworkers-probes-p%d", p) }

func (r *Runner) follower(name string) string {
	if r.common.Shadow {
		return bus.ShadowIdentity(name)
	}
	return name
}

// acquire takes a partition over: it rebuilds the partition's desired pods
// from everything the stream holds of it, tells a runtime that must be told
// (runtime.Restorer) what the partition's pods last ran, makes a runtime
// that polls (runtime.Relister) read its containers now, hands the pods to
// the controller (their workers adopt what the runtime holds: nothing that
// runs is restarted), from then on lets housekeeping look for the
// partition's runtime orphans, then follows the partition's pod updates
// from where the replay ended and its probe results from the first the
// stream holds, and answers the partition's runtime requests.
func (r *Runner) acquire(ctx context.Context, p int) error {
	r.mu.Lock()
	ctrl, rt, pub, sink := r.ctrl, r.rt, r.pub, r.sink
	r.mu.Unlock()
	log := r.log.With(zap.Int("partition", p))
	// nothing this replica said of the partition's pods before (when it
	// last owned it) may go out now: the pods' truth is rebuilt below.
	sink.Open(p)
	r.setActive(p, true)
	state, after, err := r.rebuild(ctx, p, rt)
	if err != nil {
		r.setActive(p, false)
		return err
	}
	r.handDesired(p, state)
	r.setAdopted(p)
	pctx, cancel := context.WithCancel(context.Background())
	part := &partition{cancel: cancel}
	err = r.followUpdates(ctx, p, part, ctrl, after, log)
	if err == nil {
		err = r.followProbes(ctx, p, part, ctrl, log)
	}
	if err == nil && !r.common.Shadow { // a shadow answers no runtime request: the live replicas do
		err = r.serveRequests(pctx, p, part, ctrl, rt, pub, sink)
	}
	if err != nil {
		r.stopPartition(p, part, false)
		r.setActive(p, false)
		return err
	}
	r.mu.Lock()
	r.parts[p] = part
	r.mu.Unlock()
	return nil
}

// rebuild replays the partition's desired pods from the stream, restores
// what they last ran into a runtime that must be told, and has a runtime
// that polls read its containers; it returns the pods and the stream
// sequence the replay ended at.
func (r *Runner) rebuild(ctx context.Context, p int, rt runtime.Runtime) (map[string]map[types.UID]corev1.Pod, uint64, error) {
	state, after, err := r.replay(ctx, p)
	if err == nil {
		err = r.restore(ctx, p, state)
	}
	if err == nil {
		err = r.relist(ctx, p, rt)
	}
	return state, after, err
}

// followUpdates follows the partition's pod updates and its reconciles
// (their own subject), in stream order, from after on; the op is read from
// each envelope.
func (r *Runner) followUpdates(ctx context.Context, p int, part *partition, ctrl *controller.Controller, after uint64, log *zap.Logger) error {
	updates, err := bus.Follow(ctx, r.js, bus.FollowOptions{
		Stream:  bus.StreamName(r.common.NodeName, bus.StreamPodUpdates),
		Name:    r.follower(updatesFollower(p)),
		Filters: r.subjects.PartitionPodUpdates(p),
		After:   after,
		Logger:  log,
		Metrics: r.busMetrics,
	}, func(mctx context.Context, subject string, e *bus.Envelope) error {
		u, err := decodePodUpdate(e)
		if err != nil {
			log.Error("dropping malformed pod update", zap.String(logging.FieldSubject, subject), zap.Error(err))
			return nil
		}
		if r.traces != nil {
			for i := range u.Pods {
				r.traces.Remember(mctx, string(u.Pods[i].UID))
			}
		}
		op, pods, apply := r.snapshots.Resolve(subject, e, u)
		if !apply {
			return nil
		}
		// a message that reaches a released partition is the next
		// owner's: it replays the stream.
		_ = r.gated(p, func() { ctrl.HandleUpdate(e.Source, op, p, pods) })
		return nil
	})
	if err != nil {
		return err
	}
	part.updates = updates
	part.stops = append(part.stops, updates.Stop)
	return nil
}

// followProbes follows the partition's probe results from the first the
// stream holds, so a result sent while no replica owned the partition is
// acted on by the next owner. Taking one again is harmless: the pod
// workers act only on a liveness or startup failure of a container that
// still runs under the result's container ID (a failure acted on killed
// that container) and on a startup success, which is idempotent. The
// follower keeps no state on the server (docs/podworkers.md, "Consuming
// a partition").
func (r *Runner) followProbes(ctx context.Context, p int, part *partition, ctrl *controller.Controller, log *zap.Logger) error {
	probes, err := bus.Follow(ctx, r.js, bus.FollowOptions{
		Stream:  bus.StreamName(r.common.NodeName, bus.StreamProbes),
		Name:    r.follower(probesFollower(p)),
		Filters: []string{r.subjects.ProbeResults(p)},
		Logger:  log,
		Metrics: r.busMetrics,
	}, func(mctx context.Context, subject string, e *bus.Envelope) error {
		pr, err := bus.DecodeProbeResult(e)
		if err != nil {
			log.Error("dropping malformed probe result", zap.String(logging.FieldSubject, subject), zap.Error(err))
			return nil
		}
		r.traces.Remember(mctx, string(pr.PodUID))
		// a result that reaches a released partition is the next owner's:
		// it reads the stream again.
		_ = r.gated(p, func() { ctrl.HandleProbe(pr) })
		return nil
	})
	if err != nil {
		return err
	}
	part.stops = append(part.stops, probes.Stop)
	return nil
}

// serveRequests answers the partition's runtime requests (logs, exec,
// probe exec, stats, stream, evict; reclaim on gcPartition) until pctx ends.
func (r *Runner) serveRequests(pctx context.Context, p int, part *partition, ctrl *controller.Controller, rt runtime.Runtime, pub *bus.Publisher, sink *statuspub.Publisher) error {
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
		{r.subjects.ProbeExec(p), func(ctx context.Context, m *nats.Msg) { r.serveProbeExec(ctx, ctrl, rt, pub, m) },
			bus.KindExecResult, func(e string) any { return &bus.ExecResult{ExitCode: -1, Error: e} }},
		{r.subjects.Stats(p), func(ctx context.Context, m *nats.Msg) { r.serveStats(rt, pub, p, m) },
			bus.KindStatsResult, func(e string) any { return &bus.StatsResult{Error: e} }},
		{r.subjects.Stream(p), func(ctx context.Context, m *nats.Msg) { r.serveStream(ctx, rt, pub, m) },
			bus.KindStreamResult, func(e string) any { return &bus.StreamResult{Error: e} }},
		{r.subjects.Evict(p), func(ctx context.Context, m *nats.Msg) { r.serveEvict(ctx, sink, pub, m) },
			bus.KindEvictResult, func(e string) any { return &bus.EvictResult{Error: e} }},
	} {
		if err := r.serveRequest(pctx, part, pub, s.subject, s.h, s.kind, s.failure); err != nil {
			return err
		}
	}
	if p == gcPartition {
		// node-level reclaim goes to the node's garbage collector alone.
		if err := r.serveRequest(pctx, part, pub, r.subjects.Reclaim(p), func(ctx context.Context, m *nats.Msg) { r.serveReclaim(ctx, rt, pub, m) },
			bus.KindReclaimResult, func(e string) any { return &bus.ReclaimResult{Error: e} }); err != nil {
			return err
		}
	}
	// the server holds every subscription before the partition is counted
	// acquired: a request sent after that finds its responder.
	fctx, cancel := context.WithTimeout(pctx, flushTimeout)
	defer cancel()
	return r.conn.NC.FlushWithContext(fctx)
}

// flushTimeout bounds the round trip that confirms a partition's
// subscriptions.
const flushTimeout = 10 * time.Second

// serveRequest subscribes h to subject, each request in a goroutine of its
// own that the partition waits for. A handler that panics answers the
// requester with an error of the kind it waits for, and the stage goes on.
func (r *Runner) serveRequest(pctx context.Context, part *partition, pub *bus.Publisher, subject string, h func(context.Context, *nats.Msg), kind bus.Kind, failure func(string) any) error {
	sub, err := r.conn.NC.Subscribe(subject, func(m *nats.Msg) {
		part.reqs.Add(1)
		go func() {
			defer part.reqs.Done()
			rctx, span := r.requestSpan(pctx, m)
			err := r.busMetrics.Recover(r.log, "podworkers-requests", m.Subject, func() { h(rctx, m) })
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

// stopPartition stops a partition's follower, consumer and request
// handlers. They drain first, with the gate still open, so that what was
// already delivered to this replica is applied here; a drain that hangs is
// abandoned after a while, and the closed gate then refuses what still
// comes (the next owner replays the stream, and the probe consumer
// redelivers). With fence (the lease is lost: another replica may own the
// partition soon) the gate closes first, and nothing more is applied here.
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
	stream, err := r.js.Stream(ctx, bus.StreamName(r.common.NodeName, bus.StreamPodStatus))
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
	oc, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}, DeliverPolicy: jetstream.DeliverAllPolicy,
		NamePrefix: bus.OrderedName(fmt.Sprintf("podworkers-status-p%d", p))})
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

// replay folds the partition's pod updates, everything the stream holds
// of its two subjects, into the desired pods per source, and returns the
// stream sequence it read up to: the partition's follower starts after it,
// so the next message applies on top of the state it was sent after
// (per-pod order across a handover), whatever the previous owner did or did
// not get to.
func (r *Runner) replay(ctx context.Context, p int) (map[string]map[types.UID]corev1.Pod, uint64, error) {
	// per source, the pods it wants.
	state := map[string]map[types.UID]corev1.Pod{}
	streamName := bus.StreamName(r.common.NodeName, bus.StreamPodUpdates)
	stream, err := r.js.Stream(ctx, streamName)
	if err != nil {
		return nil, 0, fmt.Errorf("partition %d: stream: %w", p, err)
	}
	subjects := r.subjects.PartitionPodUpdates(p)
	var end uint64
	for _, subject := range subjects {
		m, err := stream.GetLastMsgForSubject(ctx, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, 0, fmt.Errorf("partition %d: last message of %s: %w", p, subject, err)
		}
		end = max(end, m.Sequence)
	}
	if end == 0 {
		return state, 0, nil // nothing was ever sent to the partition
	}
	oc, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverAllPolicy,
		NamePrefix: bus.OrderedName(fmt.Sprintf("podworkers-replay-p%d", p))})
	if err != nil {
		return nil, 0, fmt.Errorf("partition %d: replay: %w", p, err)
	}
	it, err := oc.Messages()
	if err != nil {
		return nil, 0, fmt.Errorf("partition %d: replay: %w", p, err)
	}
	defer it.Stop()
	n := 0
	var last uint64
	for {
		m, err := it.Next(jetstream.NextMaxWait(5 * time.Second))
		if err != nil {
			if ctx.Err() != nil {
				return nil, 0, ctx.Err()
			}
			// what is left aged out of the stream: the follower takes
			// whatever comes after the last message read.
			break
		}
		md, err := m.Metadata()
		if err != nil {
			return nil, 0, fmt.Errorf("partition %d: replay: %w", p, err)
		}
		last = md.Sequence.Stream
		n++
		if e, err := bus.Decode(m.Data()); err == nil {
			if u, err := decodePodUpdate(e); err == nil {
				// the follower goes on assembling a snapshot whose first
				// parts the replay read.
				if op, pods, apply := r.snapshots.Resolve(m.Subject(), e, u); apply {
					foldUpdate(state, e.Source, op, pods)
				}
			}
		}
		if last >= end || md.NumPending == 0 {
			break
		}
	}
	total := 0
	for _, pods := range state {
		total += len(pods)
	}
	r.log.Info("partition state rebuilt from the stream", zap.Int("partition", p), zap.Int("messages", n), zap.Int("pods", total), zap.Uint64("upTo", last))
	return state, last, nil
}

// foldUpdate applies one pod update to the desired pods per source: a SET
// replaces the source's pods of the partition, a REMOVE drops its pods, any
// other operation sets them.
func foldUpdate(state map[string]map[types.UID]corev1.Pod, source string, op bus.Op, pods []corev1.Pod) {
	src := state[source]
	if src == nil || op == bus.OpSet {
		src = map[types.UID]corev1.Pod{}
		state[source] = src
	}
	for _, pod := range pods {
		if op == bus.OpRemove {
			delete(src, pod.UID)
		} else {
			src[pod.UID] = pod
		}
	}
}

// caughtUp says whether the partition's follower has handled every pod
// update published to the partition so far.
func (r *Runner) caughtUp(ctx context.Context, p int) bool {
	r.mu.Lock()
	part := r.parts[p]
	r.mu.Unlock()
	if part == nil || part.updates == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return part.updates.CaughtUp(ctx)
}

// heldAs refuses a runtime request unless this replica holds a pod under
// its UID (desired, or still terminating) with the namespace and name the
// request names (docs/bus.md, "Runtime requests and the pod they name"): a
// requester that resolved a name to another pod's UID is refused, never
// served that pod. The refusal does not name the pod that holds the UID.
func (r *Runner) heldAs(ref bus.ContainerRef) error {
	ctrl := r.Controller()
	if ctrl == nil {
		return errors.New("podworkers: starting")
	}
	pod, ok := ctrl.Pod(ref.PodUID)
	if !ok {
		pod, ok = ctrl.Workers().Pod(ref.PodUID)
	}
	full := ref.Namespace + "/" + ref.Pod
	if !ok {
		return fmt.Errorf("pod %q not found on this node", full)
	}
	if pod.Namespace != ref.Namespace || pod.Name != ref.Pod {
		r.log.Warn("runtime request naming another pod's UID refused", append(logging.Pod(ref.Namespace, ref.Pod, string(ref.PodUID)),
			zap.String("holder", pod.Namespace+"/"+pod.Name), zap.String("container", ref.Container))...)
		return fmt.Errorf("pod %q not found on this node: UID %s belongs to another pod", full, ref.PodUID)
	}
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
	if err == nil {
		err = r.heldAs(req.ContainerRef)
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
	req, err := decodeExec(m)
	if err == nil {
		err = r.heldAs(req.ContainerRef)
	}
	if err != nil {
		_ = pub.Send(m.Reply, bus.KindExecResult, &bus.ExecResult{ExitCode: -1, Error: err.Error()})
		return
	}
	r.answerExec(ctx, rt, pub, m.Reply, req)
}

func decodeExec(m *nats.Msg) (*bus.ExecRequest, error) {
	e, err := bus.Decode(m.Data)
	if err != nil {
		return nil, err
	}
	return bus.DecodeExecRequest(e)
}

// answerExec runs the request's command in its container and answers with
// what came of it.
func (r *Runner) answerExec(ctx context.Context, rt runtime.Runtime, pub *bus.Publisher, reply string, req *bus.ExecRequest) {
	timeout := time.Duration(req.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = time.Minute
	}
	res, err := rt.Exec(ctx, req.PodUID, req.Container, req.Command, bytes.NewReader(req.Stdin), timeout)
	out := &bus.ExecResult{Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: res.ExitCode}
	if err != nil {
		out.Error = err.Error()
	}
	if err := pub.Send(reply, bus.KindExecResult, out); err != nil {
		r.log.Warn("cannot answer exec", zap.Error(err))
	}
}

// serveStream answers a StreamRequest with the URL of the runtime's
// streaming server for an exec, an attach or a port-forward (kubelet:
// GetExec, GetAttach, GetPortForward ask the CRI runtime for it), or says
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
	if err == nil {
		err = r.heldAs(req.ContainerRef)
	}
	out := &bus.StreamResult{}
	switch {
	case err != nil:
		out.Error = err.Error()
	case req.PortForward:
		out = portForwardURL(ctx, rt, req)
	default:
		out = streamURL(ctx, rt, req)
	}
	if err := pub.Send(m.Reply, bus.KindStreamResult, out); err != nil {
		r.log.Warn("cannot answer a stream request", zap.Error(err))
	}
}

// streamURL asks the runtime's streaming server for an exec or attach URL.
func streamURL(ctx context.Context, rt runtime.Runtime, req *bus.StreamRequest) *bus.StreamResult {
	out := &bus.StreamResult{}
	st, ok := rt.(runtime.Streamer)
	if !ok {
		what := "tty"
		if req.Attach {
			what = "attach"
		}
		return &bus.StreamResult{Unsupported: true, Error: fmt.Sprintf("%s: not supported by the %s runtime", what, rt.Type())}
	}
	rctx, cancel := context.WithTimeout(ctx, streamURLTimeout)
	defer cancel()
	var err error
	if req.Attach {
		out.URL, err = st.AttachURL(rctx, req.PodUID, req.Container, req.TTY, req.Stdin, req.Stdout, req.Stderr)
	} else {
		out.URL, err = st.ExecURL(rctx, req.PodUID, req.Container, req.Command, req.TTY, req.Stdin, req.Stdout, req.Stderr)
	}
	if err != nil {
		out.Error = err.Error()
	}
	return out
}

// portForwardURL asks the runtime's streaming server for the pod's
// port-forward URL (kubelet: GetPortForward); a runtime without one
// forwards nothing.
func portForwardURL(ctx context.Context, rt runtime.Runtime, req *bus.StreamRequest) *bus.StreamResult {
	pf, ok := rt.(runtime.PortForwarder)
	if !ok {
		return &bus.StreamResult{Unsupported: true, Error: fmt.Sprintf("port-forward: not supported by the %s runtime", rt.Type())}
	}
	rctx, cancel := context.WithTimeout(ctx, streamURLTimeout)
	defer cancel()
	u, err := pf.PortForwardURL(rctx, req.PodUID, req.Ports)
	if err != nil {
		return &bus.StreamResult{Error: err.Error()}
	}
	return &bus.StreamResult{URL: u}
}

// streamURLTimeout bounds the runtime's Exec call (it only hands out a URL).
const streamURLTimeout = 10 * time.Second

func (r *Runner) serveStats(rt runtime.Runtime, pub *bus.Publisher, p int, m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	var req *bus.StatsRequest
	e, err := bus.Decode(m.Data)
	if err == nil {
		req, err = bus.DecodeStatsRequest(e)
	}
	if err != nil {
		_ = pub.Send(m.Reply, bus.KindStatsResult, &bus.StatsResult{Error: err.Error()})
		return
	}
	res := &bus.StatsResult{Pods: []bus.PodStats{}}
	if ifs, ok := rt.(runtime.ImageFs); ok {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if st, err := ifs.ImageFsStats(ctx); err == nil {
			res.ImageFs = &bus.FsStats{AvailableBytes: st.AvailableBytes, CapacityBytes: st.CapacityBytes, InodesFree: st.InodesFree, Inodes: st.Inodes, Device: st.Device}
		}
		cancel()
	}
	if req.ImageFsOnly {
		if err := pub.Send(m.Reply, bus.KindStatsResult, res); err != nil {
			r.log.Warn("cannot answer stats", zap.Error(err))
		}
		return
	}
	r.mu.Lock()
	vols := r.vols
	r.mu.Unlock()
	for _, pod := range r.Controller().PodsOf(p) {
		cs := rt.Stats(pod.UID)
		if len(cs) == 0 {
			continue
		}
		res.Pods = append(res.Pods, r.podStats(rt, vols, pod, cs))
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
