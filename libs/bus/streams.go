package bus

import (
	"context"
	"fmt"
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

// StreamConfigs returns the streams a node's stages use. Pod updates, pod
// status and probe results keep an hour of history in files, so a stage that
// restarts resumes from its durable consumer; the state stream keeps the last
// message of each subject.
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
			Discard:     jetstream.DiscardOld,
			Duplicates:  DuplicateWindow,
			Replicas:    replicas,
		}
	}
	state := history(StreamState, s.StateAll())
	state.MaxMsgsPerSubject = 1
	state.MaxAge = 0
	return []jetstream.StreamConfig{
		history(StreamPodUpdates, s.PodUpdatesAll()),
		history(StreamPodStatus, s.PodStatusAll()),
		history(StreamProbes, s.ProbeResultsAll()),
		state,
	}
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
		if replicas < 1 {
			if s, err := js.Stream(ctx, cfg.Name); err == nil {
				cfg.Replicas = s.CachedInfo().Config.Replicas
			}
		}
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("bus: ensure stream %s: %w", cfg.Name, err)
		}
	}
	return nil
}
