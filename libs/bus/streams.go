package bus

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The streams of a node. Names are splitlet_v1_<node>_<what>.
const (
	StreamPodUpdates = "podupdates"
	StreamPodStatus  = "podstatus"
	StreamProbes     = "probes"
	StreamState      = "state"
)

// StreamName is the JetStream stream name of one of the node's streams.
func StreamName(node, what string) string {
	return "splitlet_v1_" + NodeToken(node) + "_" + what
}

// DuplicateWindow is how long JetStream remembers message IDs to drop
// republished messages.
const DuplicateWindow = 2 * time.Minute

// StreamMaxBytes bounds each history stream (pod updates, pod status, probe
// results) besides its age: at twenty thousand pods a node's periodic SETs
// alone would store gigabytes an hour. The oldest messages go first; a
// stage that falls that far behind converges on the next SET and status.
const StreamMaxBytes = 256 << 20

// StreamConfigs returns the streams a node's stages use. Pod updates, pod
// status and probe results keep an hour of history in files, so a stage that
// restarts resumes from its durable consumer; the state stream keeps the last
// message of each subject. The pod-updates stream takes podupdates.>: the
// pod updates and the reconciles of each partition are kept in one stream,
// in the order they were published.
func StreamConfigs(node string, replicas int) []jetstream.StreamConfig {
	s := For(node)
	if replicas < 1 {
		replicas = 1
	}
	history := func(what, subject string) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:        StreamName(node, what),
			Description: fmt.Sprintf("Splitlet v1 %s of node %s", what, node),
			Subjects:    []string{subject},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			MaxAge:      time.Hour,
			MaxBytes:    StreamMaxBytes,
			Discard:     jetstream.DiscardOld,
			Duplicates:  DuplicateWindow,
			Replicas:    replicas,
		}
	}
	state := history(StreamState, s.StateAll())
	state.MaxMsgsPerSubject = 1
	state.MaxAge = 0
	state.MaxBytes = 0
	return []jetstream.StreamConfig{
		history(StreamPodUpdates, s.PodUpdatesStream()),
		history(StreamPodStatus, s.PodStatusAll()),
		history(StreamProbes, s.ProbeResultsAll()),
		state,
	}
}

// conforms says whether a stream's configuration has the contract's
// settings. The subjects must be exactly the contract's: a pod-updates
// stream of podupdates.* alone (which leaves the reconciles out) does not
// conform, and is widened to podupdates.>.
func conforms(have, want jetstream.StreamConfig) bool {
	return slices.Equal(have.Subjects, want.Subjects) && have.Retention == want.Retention && have.Storage == want.Storage &&
		have.MaxAge == want.MaxAge && unlimited(have.MaxBytes) == unlimited(want.MaxBytes) && have.Discard == want.Discard && have.Duplicates == want.Duplicates &&
		have.Replicas == want.Replicas && unlimited(have.MaxMsgsPerSubject) == unlimited(want.MaxMsgsPerSubject)
}

// unlimited maps a limit's "none" (0 when asked, -1 as the server keeps
// it) to one value.
func unlimited(v int64) int64 {
	if v <= 0 {
		return -1
	}
	return v
}

// EnsureStreams creates the node's streams, or updates them to this
// contract's settings. Any stage may call it; it is idempotent. A stream
// that exists keeps its replica count; a new one gets one replica (see
// EnsureStreamsReplicas).
func EnsureStreams(ctx context.Context, js jetstream.JetStream, node string) error {
	return EnsureStreamsReplicas(ctx, js, node, 0)
}

// EnsureStreamsReplicas is EnsureStreams with the streams at the given
// replica count (3 on a three-server NATS cluster, so that losing one
// server loses nothing); 0 keeps an existing stream's count and makes new
// ones with one.
func EnsureStreamsReplicas(ctx context.Context, js jetstream.JetStream, node string, replicas int) error {
	for _, cfg := range StreamConfigs(node, replicas) {
		if s, err := js.Stream(ctx, cfg.Name); err == nil {
			have := s.CachedInfo().Config
			if replicas < 1 {
				cfg.Replicas = have.Replicas
			}
			// A stream that is as the contract says is left alone: a stage
			// whose identity may not manage streams (they were made by
			// `splitlet bus init`) only reads it.
			if conforms(have, cfg) {
				continue
			}
		}
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("bus: ensure stream %s: %w", cfg.Name, err)
		}
	}
	return nil
}
