package service

import (
	"context"
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
func replay(ctx context.Context, js jetstream.JetStream, stream string, window time.Duration, handle bus.Handler, log *zap.Logger) (int, error) {
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
	c, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartTimePolicy,
		OptStartTime:  &start,
	})
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
