package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// FollowOptions describe a reading of some subjects of a stream that keeps
// no state on the server: an ordered consumer (memory storage, no
// acknowledgements). It fits a reader that rebuilds what it needs from the
// stream whenever it starts, so that where it stopped never has to be
// stored: a durable consumer rewrites its state on the server up to ten
// times a second while messages flow.
type FollowOptions struct {
	// Stream is the stream name (see StreamName).
	Stream string
	// Name labels the reader in lag reports (Consumers.Lags), metrics and logs.
	Name string
	// Filters restrict the reader to some subjects of the stream.
	Filters []string
	// After is the stream sequence to start after (0: from the first
	// message the stream holds).
	After uint64
	// Since, when After is 0, starts at the first message the server stored
	// at or after this time (the server's clock).
	Since time.Time
	// RetryDelay before a message whose handler failed is handed to it
	// again (default 1 s).
	RetryDelay time.Duration
	// OrderedByHandler: see ConsumerOptions. Without it, a message whose
	// envelope Seq its source already sent on the subject is skipped.
	OrderedByHandler bool
	Logger           *zap.Logger
	// Metrics count the deliveries and panics (nil: counted nowhere).
	Metrics *Metrics
}

// followResetAttempts bounds how often nats.go tries to recreate a lost
// ordered consumer under one name. A name can stay unusable: in a cluster,
// a consumer placed on a server that died before the others noticed stays
// assigned to it, and every retry of that name answers "consumer is
// offline". After these attempts the client reports the error and the next
// repair takes a new name, which is placed on a live server.
const followResetAttempts = 2

// Follower is a running Follow.
type Follower struct {
	cons    jetstream.Consumer
	cc      jetstream.ConsumeContext
	cancel  context.CancelFunc
	quit    chan struct{}
	handled atomic.Uint64
	busy    sync.WaitGroup
	untrack func()
	once    sync.Once
}

// Follow runs handler on every message of the stream's filtered subjects
// after opts.After, one at a time, in stream order, until Stop. Nothing is
// ever delivered twice: a handler that returns an error is called again
// with the same message after RetryDelay (as long as the follower runs),
// one that panics is called again up to MaxPanicDeliveries times, then the
// message is skipped; a message that does not decode is logged and
// skipped. A lost server connection or consumer is repaired from the last
// message handed to the handler.
func Follow(ctx context.Context, js jetstream.JetStream, opts FollowOptions, handler Handler) (*Follower, error) {
	if opts.Stream == "" || opts.Name == "" {
		return nil, errors.New("bus: a follower needs a stream and a name")
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: opts.Filters, DeliverPolicy: jetstream.DeliverAllPolicy,
		NamePrefix: OrderedName(opts.Name), MaxResetAttempts: followResetAttempts}
	switch {
	case opts.After > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, opts.After+1
	case !opts.Since.IsZero():
		since := opts.Since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	cons, err := js.OrderedConsumer(ctx, opts.Stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("bus: follower %s on %s: %w", opts.Name, opts.Stream, err)
	}
	retry := or(opts.RetryDelay, time.Second)
	rcv := newReceiver(opts.Stream, opts.Name, !opts.OrderedByHandler, log, opts.Metrics.orUnregistered(), handler)
	hctx, cancel := context.WithCancel(ctx)
	f := &Follower{cons: cons, cancel: cancel, quit: make(chan struct{})}
	f.handled.Store(opts.After)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		f.busy.Add(1)
		defer f.busy.Done()
		for attempt := 1; ; attempt++ {
			v, _, fields := rcv.receive(hctx, m)
			if v == verdictPanic && attempt >= MaxPanicDeliveries {
				log.Error("message handler panicked; skipping the message", append(fields, zap.Int("attempts", attempt))...)
				break
			}
			if v == verdictDone || v == verdictMalformed {
				break
			}
			if f.stopping() {
				return
			}
			if v == verdictPanic {
				log.Error("message handler panicked; will retry", fields...)
			} else {
				log.Warn("message handling failed, will retry", fields...)
			}
			select {
			case <-f.quit:
				return
			case <-time.After(retry):
			}
		}
		if md, err := m.Metadata(); err == nil {
			f.handled.Store(md.Sequence.Stream)
		}
	}, consumeErrors(hctx, log, "follower", opts.Name))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("bus: follow %s: %w", opts.Name, err)
	}
	f.cc = cc
	f.untrack = track(js, opts.Stream, opts.Name, cons)
	return f, nil
}

// Handled is the stream sequence of the last message the handler was done
// with (opts.After before the first).
func (f *Follower) Handled() uint64 { return f.handled.Load() }

// CaughtUp says whether the follower has handled every message of its
// subjects that the stream held when asked.
func (f *Follower) CaughtUp(ctx context.Context) bool {
	info, err := f.cons.Info(ctx)
	return err == nil && info.NumPending == 0 && info.Delivered.Stream <= f.Handled()
}

func (f *Follower) stopping() bool {
	select {
	case <-f.quit:
		return true
	default:
		return false
	}
}

// Stop ends the follower: the messages it already fetched are handled
// first, without retries (a message that fails then is left), then it
// returns.
func (f *Follower) Stop() {
	f.once.Do(func() {
		close(f.quit)
		f.untrack()
		f.cc.Drain()
		<-f.cc.Closed()
		f.cancel()
		f.busy.Wait()
	})
}
