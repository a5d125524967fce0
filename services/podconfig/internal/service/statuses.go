package service

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/services/podconfig/internal/mirror"
)

// followStatuses hands the mirror manager the pod workers' statuses
// published from now on (what ran before podconfig started is not replayed:
// a static pod whose status it has not seen counts as not running, as a
// restarted kubelet knows no terminating pod). It retries until the
// podstatus stream answers or ctx ends, then follows until ctx ends.
func followStatuses(ctx context.Context, js jetstream.JetStream, node string, waitStreams func(context.Context) error,
	m *mirror.Manager, bm *bus.Metrics, log *zap.Logger) {
	if waitStreams != nil {
		if err := waitStreams(ctx); err != nil {
			return
		}
	}
	stream := bus.StreamName(node, bus.StreamPodStatus)
	handler := func(_ context.Context, _ string, e *bus.Envelope) error {
		if rs, err := bus.DecodePodRuntimeStatus(e); err == nil {
			m.RuntimeStatus(rs)
		}
		return nil
	}
	var f *bus.Follower
	_ = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := js.Stream(ctx, stream)
		if err == nil {
			var info *jetstream.StreamInfo
			if info, err = s.Info(ctx); err == nil {
				f, err = bus.Follow(ctx, js, bus.FollowOptions{Stream: stream, Name: "podconfig-mirrors",
					After: info.State.LastSeq, Logger: log, Metrics: bm}, handler)
			}
		}
		if err != nil && ctx.Err() == nil {
			log.Info("cannot follow the pod workers' statuses yet, will retry", zap.String("stream", stream), zap.Error(err))
		}
		return err == nil, nil
	})
	if f == nil {
		return
	}
	<-ctx.Done()
	f.Stop()
}
