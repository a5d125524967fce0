package bus

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/periodic"
	"github.com/splitlet/splitlet/libs/tracing"
)

// unsettled is what the messages a consumer terminated left undone: one
// mark for what each was about, until a later message about the same
// settles it or the recovery hands the terminated one to the handler again
// successfully. It lives in the consumer's memory: a stage that restarts
// rebuilds its view from the streams and the next snapshots.
type unsettled struct {
	mu    sync.Mutex
	marks map[string]mark
}

// mark is one terminated message still unsettled.
type mark struct {
	subject string
	// seq is the message's stream sequence.
	seq uint64
	// redo: its kind has no periodic snapshot, so the recovery fetches it
	// from the stream again; otherwise the next snapshot settles it.
	redo bool
}

func newUnsettled() *unsettled { return &unsettled{marks: map[string]mark{}} }

// markKey says what a message is about, as far as a newer message
// supersedes it: a pod update its source's partition (the next SET of it
// says everything about its pods), a runtime status its pod, a probe
// result its pod, container and probe, anything else its subject; and
// whether the kind is recovered from the stream (redo) rather than from a
// snapshot.
func markKey(subject string, e *Envelope) (key string, redo bool) {
	switch e.Kind {
	case KindPodUpdate:
		if p, ok := PartitionOf(subject); ok {
			return "PodUpdate " + e.Source + " " + strconv.Itoa(p), false
		}
	case KindPodRuntimeStatus:
		if rs, err := DecodePodRuntimeStatus(e); err == nil {
			return "PodRuntimeStatus " + string(rs.UID), true
		}
	case KindProbeResult:
		if pr, err := DecodeProbeResult(e); err == nil {
			return "ProbeResult " + string(pr.PodUID) + " " + pr.Container + " " + string(pr.Probe), true
		}
	}
	return "subject " + subject, true
}

// mark records a terminated message.
func (u *unsettled) mark(subject string, seq uint64, e *Envelope) {
	if e == nil {
		return
	}
	key, redo := markKey(subject, e)
	u.mu.Lock()
	u.marks[key] = mark{subject: subject, seq: seq, redo: redo}
	u.mu.Unlock()
}

// settle clears the mark a message handled successfully supersedes: a pod
// update's mark only by a whole snapshot (a SET, or the last part of one).
func (u *unsettled) settle(subject string, e *Envelope, log *zap.Logger) {
	u.mu.Lock()
	empty := len(u.marks) == 0
	u.mu.Unlock()
	if empty {
		return
	}
	if e.Kind == KindPodUpdate && !wholeSnapshot(e) {
		return
	}
	key, _ := markKey(subject, e)
	u.mu.Lock()
	m, ok := u.marks[key]
	delete(u.marks, key)
	u.mu.Unlock()
	if ok {
		log.Info("a newer message settled a terminated one", zap.String("subject", subject), zap.Uint64("terminatedSeq", m.seq),
			zap.String("source", e.Source), zap.Uint64("seq", e.Seq), zap.String("op", string(e.Op)))
	}
}

// wholeSnapshot: a SET, or the last part of one.
func wholeSnapshot(e *Envelope) bool {
	switch e.Op {
	case OpSet:
		return true
	case OpSetPart:
		u, err := DecodePodUpdate(e)
		return err == nil && u.Snapshot != nil && u.Snapshot.Part == u.Snapshot.Parts
	}
	return false
}

// redoable lists the marks the recovery fetches from the stream.
func (u *unsettled) redoable() map[string]mark {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := map[string]mark{}
	for k, m := range u.marks {
		if m.redo {
			out[k] = m
		}
	}
	return out
}

// holds says whether key is still marked for the message at seq.
func (u *unsettled) holds(key string, seq uint64) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.marks[key].seq == seq
}

// drop clears key's mark if it is still the one for seq.
func (u *unsettled) drop(key string, seq uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.marks[key].seq == seq {
		delete(u.marks, key)
	}
}

type recoveringKey struct{}

// Recovering says whether a handler is called by the recovery of a message
// Consume terminated: the message is older than some the handler took
// since, though none that supersedes it (a newer one about the same pod
// settles the mark), so a handler that skips messages not newer than the
// last of their subject must take this one.
func Recovering(ctx context.Context) bool {
	v, _ := ctx.Value(recoveringKey{}).(bool)
	return v
}

// recoverLoop tries the redoable marks again every RecoverEvery, until ctx
// ends.
func (c *consumer) recoverLoop(ctx context.Context) {
	periodic.Run(ctx, c.opts.RecoverEvery, func(ctx context.Context) {
		if marks := c.marks.redoable(); len(marks) > 0 {
			c.recoverMarks(ctx, marks)
		}
	})
}

// recoverMarks fetches each marked message from the stream and hands it to
// the handler again, unless a newer message settled it meanwhile. A
// message the stream no longer holds (it keeps an hour) is given up.
func (c *consumer) recoverMarks(ctx context.Context, marks map[string]mark) {
	s, err := c.js.Stream(ctx, c.opts.Stream)
	if err != nil {
		c.log.Debug("cannot recover terminated messages yet", zap.String("consumer", c.opts.Durable), zap.Error(err))
		return
	}
	for key, m := range marks {
		f := []zap.Field{zap.String("consumer", c.opts.Durable), zap.String("subject", m.subject), zap.Uint64("streamSeq", m.seq)}
		raw, err := s.GetMsg(ctx, m.seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			c.marks.drop(key, m.seq)
			c.log.Warn("a terminated message is no longer in the stream; what it carried is not recovered", f...)
			continue
		}
		if err != nil {
			c.log.Debug("cannot fetch a terminated message yet", append(f, zap.Error(err))...)
			continue
		}
		e, err := DecodeMsg(raw.Header, raw.Data)
		if err != nil {
			c.marks.drop(key, m.seq)
			continue
		}
		if err := c.redo(ctx, key, m, raw, e); err != nil {
			c.log.Debug("a terminated message still fails", append(f, zap.Error(err))...)
			continue
		}
		c.log.Info("recovered a terminated message", append(f, podFields(e)...)...)
	}
}

// redo hands a terminated message to the handler again, if it is still
// marked, and clears the mark when the handler takes it.
func (c *consumer) redo(ctx context.Context, key string, m mark, raw *jetstream.RawStreamMsg, e *Envelope) error {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	if !c.marks.holds(key, m.seq) {
		return nil
	}
	hctx := context.WithValue(tracing.Extract(ctx, raw.Header), recoveringKey{}, true)
	if _, err := safely(hctx, c.handler, raw.Subject, e); err != nil {
		return err
	}
	c.marks.drop(key, m.seq)
	return nil
}

// maxLoggedPods bounds the pods a log line about one message names.
const maxLoggedPods = 10

// podFields name the pods a message is about, for a log line.
func podFields(e *Envelope) []zap.Field {
	if e == nil {
		return nil
	}
	switch e.Kind {
	case KindPodRuntimeStatus:
		if rs, err := DecodePodRuntimeStatus(e); err == nil {
			return logging.Pod(rs.Namespace, rs.Name, string(rs.UID))
		}
	case KindProbeResult:
		if pr, err := DecodeProbeResult(e); err == nil {
			return append(logging.Pod(pr.Namespace, pr.Name, string(pr.PodUID)),
				zap.String("container", pr.Container), zap.String("probe", string(pr.Probe)))
		}
	case KindPodUpdate:
		if u, err := DecodePodUpdate(e); err == nil {
			var pods, uids []string
			for i := range u.Pods[:min(len(u.Pods), maxLoggedPods)] {
				pods = append(pods, u.Pods[i].Namespace+"/"+u.Pods[i].Name)
				uids = append(uids, string(u.Pods[i].UID))
			}
			return []zap.Field{zap.String("op", string(e.Op)), zap.Int("podCount", len(u.Pods)),
				zap.Strings(logging.FieldPod, pods), zap.Strings(logging.FieldUID, uids)}
		}
	}
	return nil
}
