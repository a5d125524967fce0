package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/splitlet/splitlet/libs/bus"
)

// replay re-reads the last window of a stream before the stage's durable
// consumer resumes. The durable consumer acknowledges a message once the
// status manager has taken it, before the status is written; a stage that
// crashed in between would otherwise never write that status. Handling is
// level-triggered and idempotent, so messages seen twice do no harm.
// filter, when set, is the only subject of the stream read (the durable
// consumer's).
func replay(ctx context.Context, js jetstream.JetStream, stream, filter string, window time.Duration, handle bus.Handler, log *zap.Logger) (int, error) {
	if window <= 0 {
		return 0, nil
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("replay %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("replay %s: %w", stream, err)
	}
	start := time.Now().Add(-window)
	last := info.State.LastSeq
	if info.State.Msgs == 0 || info.State.LastTime.Before(start) {
		return 0, nil
	}
	cfg := jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartTimePolicy,
		OptStartTime:  &start,
		NamePrefix:    bus.OrderedName("statussync-replay"),
	}
	if filter != "" {
		// The stream's last message may be one the filter leaves out (a
		// reconcile in the pod-updates stream), which the loop below would
		// wait for in vain: it stops at the filter's last instead.
		m, err := s.GetLastMsgForSubject(ctx, filter)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return 0, nil
		}
		if err != nil {
			return 0, fmt.Errorf("replay %s: %w", stream, err)
		}
		if m.Time.Before(start) {
			return 0, nil
		}
		last = m.Sequence
		cfg.FilterSubjects = []string{filter}
	}
	c, err := js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return 0, fmt.Errorf("replay %s: %w", stream, err)
	}
	n := 0
	for {
		batch, err := c.Fetch(512, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return n, fmt.Errorf("replay %s: %w", stream, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			meta, merr := m.Metadata()
			if e, derr := bus.Decode(m.Data()); derr == nil {
				if herr := handle(ctx, m.Subject(), e); herr != nil {
					log.Debug("replayed message not taken", zap.String("subject", m.Subject()), zap.Error(herr))
				}
				n++
			}
			if merr == nil && meta.Sequence.Stream >= last {
				return n, nil
			}
		}
		if got == 0 || ctx.Err() != nil {
			return n, batch.Error()
		}
	}
}
