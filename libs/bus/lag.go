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

// running holds the consumers Consume runs in this process, so that a
// stage can report their lag (StageStatus) without knowing where each was
// started.
var running = struct {
	sync.Mutex
	set map[*runningConsumer]struct{}
}{set: map[*runningConsumer]struct{}{}}

type runningConsumer struct {
	stream, durable string
	c               jetstream.Consumer
}

func track(stream, durable string, c jetstream.Consumer) (untrack func()) {
	rc := &runningConsumer{stream: stream, durable: durable, c: c}
	running.Lock()
	running.set[rc] = struct{}{}
	running.Unlock()
	return func() {
		running.Lock()
		delete(running.set, rc)
		running.Unlock()
	}
}

// Lags reads the lag of the consumers this process runs for a stage: those
// whose durable name is the stage's name or starts with it and a dash (the
// stages name their durables so). Sorted by stream and durable name.
func Lags(ctx context.Context, stage string) []ConsumerLag {
	running.Lock()
	var mine []*runningConsumer
	for rc := range running.set {
		if rc.durable == stage || strings.HasPrefix(rc.durable, stage+"-") {
			mine = append(mine, rc)
		}
	}
	running.Unlock()
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
