package bus

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// ConsumerLag is how far one durable consumer is behind its stream: what
// the stream holds that the consumer has not delivered yet, and what it
// delivered that is not acknowledged yet.
type ConsumerLag struct {
	Stream     string `json:"stream"`
	Durable    string `json:"durable"`
	Pending    uint64 `json:"pending"`
	AckPending int    `json:"ackPending"`
	// Error says why the figures could not be read (they are zero then).
	Error string `json:"error,omitempty"`
}

// Consumers lists the consumers one stage runs, so that the stage reports
// their lag (StageStatus) without knowing where each was started. A
// stage's JetStream handle carries its list (WithConsumers): Consume and
// Follow on that handle put their consumer on it while it runs. Two stages
// of one process each report only their own consumers.
type Consumers struct {
	mu  sync.Mutex
	set map[*runningConsumer]struct{}
}

// NewConsumers is an empty list.
func NewConsumers() *Consumers {
	return &Consumers{set: map[*runningConsumer]struct{}{}}
}

type runningConsumer struct {
	stream, durable string
	c               jetstream.Consumer
}

// listedJS is a JetStream handle whose consumers go on a list.
type listedJS struct {
	jetstream.JetStream
	consumers *Consumers
}

// WithConsumers is js with the consumers Consume and Follow run on it put
// on cs.
func WithConsumers(js jetstream.JetStream, cs *Consumers) jetstream.JetStream {
	return listedJS{JetStream: js, consumers: cs}
}

// track puts a consumer run on js on js's list, if it carries one.
func track(js jetstream.JetStream, stream, durable string, c jetstream.Consumer) (untrack func()) {
	l, ok := js.(listedJS)
	if !ok {
		return func() {}
	}
	cs, rc := l.consumers, &runningConsumer{stream: stream, durable: durable, c: c}
	cs.mu.Lock()
	cs.set[rc] = struct{}{}
	cs.mu.Unlock()
	return func() {
		cs.mu.Lock()
		delete(cs.set, rc)
		cs.mu.Unlock()
	}
}

// Lags reads the lag of the consumers on the list (none for a nil list),
// sorted by stream and durable name.
func (cs *Consumers) Lags(ctx context.Context) []ConsumerLag {
	if cs == nil {
		return []ConsumerLag{}
	}
	cs.mu.Lock()
	mine := make([]*runningConsumer, 0, len(cs.set))
	for rc := range cs.set {
		mine = append(mine, rc)
	}
	cs.mu.Unlock()
	out := make([]ConsumerLag, 0, len(mine))
	for _, rc := range mine {
		l := ConsumerLag{Stream: rc.stream, Durable: rc.durable}
		if info, err := rc.c.Info(ctx); err != nil {
			l.Error = err.Error()
		} else {
			l.Pending, l.AckPending = info.NumPending, info.NumAckPending
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b ConsumerLag) int {
		if c := strings.Compare(a.Stream, b.Stream); c != 0 {
			return c
		}
		return strings.Compare(a.Durable, b.Durable)
	})
	return out
}
