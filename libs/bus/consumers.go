package bus

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Durable consumer names. Every one starts with its stage's name, and a
// stage identity may create, read, delete and acknowledge its own alone
// (StageStreams, docs/bus.md's permission table).
const (
	DurableProberPodUpdates     = "prober"
	DurableProberPodStatus      = "prober-status"
	DurableStatussyncPodUpdates = "statussync"
	DurableStatussyncPodStatus  = "statussync-status"
	DurableStatussyncProbes     = "statussync-probes"
)

// OrderedName is the name prefix of an ordered consumer: the reader's name
// (its stage's name first) and a random part, to which nats.go appends
// _<serial>. The server's consumer list then shows whose it is, and no
// other stage can guess it (a stage may not list consumers).
func OrderedName(reader string) string { return reader + "-" + nuid.Next() }

// StreamUse is what a stage reads of one stream, and so the JetStream API
// its identity may use there.
type StreamUse struct {
	// Stream is the stream's name.
	Stream string
	// Durables are the stage's durable consumers on the stream.
	Durables []string
	// Ordered: the stage also reads the stream with ordered consumers,
	// whose names nats.go makes (OrderedName, or a hash for a key-value
	// watch). NATS permissions match whole subject tokens only, so these
	// take any name but the other stages' durables.
	Ordered bool
	// Push: one of them is a push consumer (a key-value watch), which
	// answers the server's flow control.
	Push bool
	// Gets: the stage reads single messages (the last of a subject, a key,
	// or a message one of its durables terminated, which Consume fetches
	// again to recover what it carried).
	Gets bool
}

// StageStreams lists what a stage reads, stream by stream, on a node.
func StageStreams(stage, node string) []StreamUse {
	name := func(what string) string { return StreamName(node, what) }
	switch stage {
	case StagePodworkers:
		return []StreamUse{
			// a partition's pod updates and runtime status, replayed on
			// taking it over, then followed; its probe results followed
			// from the first the stream holds.
			{Stream: name(StreamPodUpdates), Ordered: true, Gets: true},
			{Stream: name(StreamPodStatus), Ordered: true, Gets: true},
			{Stream: name(StreamProbes), Ordered: true, Gets: true},
			{Stream: name(StreamState), Ordered: true},
			// the partition leases.
			{Stream: "KV_" + LeaseBucket(node), Ordered: true, Push: true, Gets: true},
		}
	case StageProber:
		return []StreamUse{
			{Stream: name(StreamPodUpdates), Durables: []string{DurableProberPodUpdates}, Gets: true},
			{Stream: name(StreamPodStatus), Durables: []string{DurableProberPodStatus}, Gets: true},
		}
	case StageStatussync:
		// each durable resumes after a replay of the last minutes.
		return []StreamUse{
			{Stream: name(StreamPodUpdates), Durables: []string{DurableStatussyncPodUpdates}, Ordered: true, Gets: true},
			{Stream: name(StreamPodStatus), Durables: []string{DurableStatussyncPodStatus}, Ordered: true, Gets: true},
			{Stream: name(StreamProbes), Durables: []string{DurableStatussyncProbes}, Ordered: true, Gets: true},
		}
	case StageNodehb:
		return []StreamUse{{Stream: name(StreamState), Ordered: true}}
	case StagePodconfig:
		// the pod workers' statuses from now on: a mirror pod stays while
		// its static pod's worker has not terminated it.
		return []StreamUse{{Stream: name(StreamPodStatus), Ordered: true}}
	}
	return nil
}

// retiredDurable matches durable names the contract does not define and a
// node's server may hold: per-partition probe durables of the pod workers,
// which follow the probe results and keep nothing on the server.
var retiredDurable = regexp.MustCompile(`^podworkers-probes-p[0-9]+$`)

// RemoveRetiredConsumers deletes the node's durable consumers that no
// stage reads (retiredDurable): left on the server, each would stay there
// for good. It returns how many went. Listing consumers takes the
// admin's rights (splitlet bus init, an embedded server).
func RemoveRetiredConsumers(ctx context.Context, js jetstream.JetStream, node string) (int, error) {
	s, err := js.Stream(ctx, StreamName(node, StreamProbes))
	if err != nil {
		return 0, fmt.Errorf("bus: stream %s: %w", StreamName(node, StreamProbes), err)
	}
	var retired []string
	names := s.ConsumerNames(ctx)
	for name := range names.Name() {
		if retiredDurable.MatchString(name) {
			retired = append(retired, name)
		}
	}
	if err := names.Err(); err != nil {
		return 0, fmt.Errorf("bus: consumers of %s: %w", StreamName(node, StreamProbes), err)
	}
	removed := 0
	for _, name := range retired {
		if err := s.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return removed, fmt.Errorf("bus: remove retired consumer %s: %w", name, err)
		}
		removed++
	}
	return removed, nil
}
