package service

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/services/podconfig/internal/mirror"
)

// statusReplay is how far back a reader started after podconfig's start
// reads: the static pod that made the statuses matter again was published
// before the mirror manager learned of it, and its first status may
// already be in the stream. It also covers a server clock a little behind.
const statusReplay = time.Minute

// statusRecheck bounds how long a change of the mirror manager's needs
// can go unnoticed (Changes is the prompt way).
const statusRecheck = 30 * time.Second

// statusFollower hands the mirror manager the pod workers' statuses while
// it wants them (WantsStatuses). The first reader starts at the stream's
// end when podconfig starts (what ran before podconfig started is not
// replayed: a static pod whose status it has not seen counts as not
// running, as a restarted kubelet knows no terminating pod); a reader
// started later reads back statusReplay, never to before podconfig's start.
type statusFollower struct {
	js          jetstream.JetStream
	node        string
	waitStreams func(context.Context) error
	m           *mirror.Manager
	bm          *bus.Metrics
	log         *zap.Logger
	// following: a reader runs.
	following atomic.Bool
}

// run follows until ctx ends.
func (s *statusFollower) run(ctx context.Context) {
	started := time.Now()
	if s.waitStreams != nil {
		if err := s.waitStreams(ctx); err != nil {
			return
		}
	}
	stream := bus.StreamName(s.node, bus.StreamPodStatus)
	after, ok := streamEnd(ctx, s.js, stream, s.log)
	if !ok {
		return
	}
	var f *bus.Follower
	defer func() {
		if f != nil {
			f.Stop()
		}
	}()
	first := true
	for {
		retry := statusRecheck
		switch want := s.m.WantsStatuses(); {
		case want && f == nil:
			opts := bus.FollowOptions{Stream: stream, Name: "podconfig-mirrors", Logger: s.log, Metrics: s.bm}
			if first {
				opts.After = after
			} else {
				opts.Since = later(time.Now().Add(-statusReplay), started)
			}
			var err error
			if f, err = bus.Follow(ctx, s.js, opts, s.handle); err != nil {
				f, retry = nil, time.Second
				if ctx.Err() == nil {
					s.log.Info("cannot follow the pod workers' statuses yet, will retry", zap.String("stream", stream), zap.Error(err))
				}
				break
			}
			first = false
			s.following.Store(true)
			s.log.Info("following the pod workers' statuses for the mirror pods", zap.String("stream", stream))
		case !want && f != nil:
			f.Stop()
			f = nil
			s.following.Store(false)
			s.log.Info("no static pod and no mirror pod: not following the pod workers' statuses", zap.String("stream", stream))
		}
		select {
		case <-ctx.Done():
			return
		case <-s.m.Changes():
		case <-time.After(retry):
		}
	}
}

func (s *statusFollower) handle(_ context.Context, _ string, e *bus.Envelope) error {
	if rs, err := bus.DecodePodRuntimeStatus(e); err == nil {
		s.m.RuntimeStatus(rs)
	}
	return nil
}

// streamEnd is the stream's last sequence, asked until the stream answers
// or ctx ends.
func streamEnd(ctx context.Context, js jetstream.JetStream, stream string, log *zap.Logger) (uint64, bool) {
	var last uint64
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := js.Stream(ctx, stream)
		if err == nil {
			var info *jetstream.StreamInfo
			if info, err = s.Info(ctx); err == nil {
				last = info.State.LastSeq
				return true, nil
			}
		}
		if ctx.Err() == nil {
			log.Info("cannot read the pod workers' statuses yet, will retry", zap.String("stream", stream), zap.Error(err))
		}
		return false, nil
	})
	return last, err == nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
