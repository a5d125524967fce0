package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/types"
)

// Shadow mode (docs/bus.md, "Shadow stages"): a candidate stage runs beside
// the live one on live traffic. It consumes what the live stage consumes,
// with durable consumers of its own (ShadowDurable), and publishes what it
// would publish under the node's shadow prefix,
// splitlet.v1.<node>.shadow.<stage>.…, which no live stage reads. Its bus
// identity (ShadowIdentity) may publish there and nowhere else a stage
// reads.

const tokShadow = "shadow"

// StreamShadow is the short name of the stream that keeps what the node's
// shadow stages publish (splitlet_v1_<node>_shadow), so that `splitlet bus
// diff --live` can compare it with the live stage's stream.
const StreamShadow = "shadow"

// ShadowStages are the stages that have a shadow mode.
var ShadowStages = []string{StagePodworkers, StageProber, StageStatussync}

// ShadowIdentity is the bus identity of a stage's shadow: shadow-<stage>.
// Its durables, inboxes and service name start with it.
func ShadowIdentity(stage string) string { return tokShadow + "-" + stage }

// ShadowDurable is the shadow's name for one of the live stage's durable
// consumers: shadow-<durable>. The shadow reads the same messages without
// taking them from the live stage or acknowledging for it.
func ShadowDurable(durable string) string { return tokShadow + "-" + durable }

// Shadow returns the subjects a shadow of stage publishes on: the node's
// subjects under splitlet.v1.<node>.shadow.<stage> (its probe results on
// …shadow.prober.probes.<p>, say).
func (s Subjects) Shadow(stage string) Subjects {
	return Subjects{prefix: s.prefix + "." + tokShadow + "." + stage}
}

// StatusPatches is where a shadow statussync publishes, under its shadow
// prefix, the writes it would have sent to the API server for the pods of
// the partition (StatusPatch); a live statussync sends them instead.
func (s Subjects) StatusPatches(partition int) string { return s.part(tokStatusPatches, partition) }

const tokStatusPatches = "statuspatches"

// StatusPatch is a write a shadow statussync computed and did not send: a
// pod's status patch (strategic merge, as statussync sends it to the
// status subresource), or the deletion of a finished pod.
type StatusPatch struct {
	PodUID    types.UID       `json:"podUID"`
	Namespace string          `json:"namespace"`
	Name      string          `json:"name"`
	Patch     json.RawMessage `json:"patch,omitempty"`
	Delete    bool            `json:"delete,omitempty"`
}

func (p *StatusPatch) validate(*Envelope) error {
	switch {
	case p.PodUID == "":
		return fieldErr("payload.podUID", "required")
	case p.Delete == (len(p.Patch) > 0):
		return fieldErr("payload", "a StatusPatch carries a patch or delete, one of them")
	}
	return nil
}

// DecodeStatusPatch decodes and checks a StatusPatch payload.
func DecodeStatusPatch(e *Envelope) (*StatusPatch, error) {
	return DecodePayload[StatusPatch](e, KindStatusPatch)
}

// ShadowEvents is where a shadow pod worker publishes, under its shadow
// prefix, the Events it would have recorded about the pods of the
// partition (ShadowEvent); a live pod worker records them in the API
// server.
func (s Subjects) ShadowEvents(partition int) string { return s.part(tokEvents, partition) }

const tokEvents = "events"

// ShadowEvent is an Event a shadow stage decided on and did not record:
// the object it is about (a Pod, or the Node) and the Event's type, reason
// and message, as the live stage records them.
type ShadowEvent struct {
	Object    string    `json:"object"`
	Namespace string    `json:"namespace,omitempty"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid,omitempty"`
	Type      string    `json:"type"`
	Reason    string    `json:"reason"`
	Message   string    `json:"message,omitempty"`
}

func (ev *ShadowEvent) validate(*Envelope) error {
	switch {
	case ev.Name == "":
		return fieldErr("payload.name", "required")
	case ev.Reason == "":
		return fieldErr("payload.reason", "required")
	case ev.Type != "Normal" && ev.Type != "Warning":
		return fieldErr("payload.type", "is %q, want Normal or Warning", ev.Type)
	}
	return nil
}

// DecodeShadowEvent decodes and checks a ShadowEvent payload.
func DecodeShadowEvent(e *Envelope) (*ShadowEvent, error) {
	return DecodePayload[ShadowEvent](e, KindShadowEvent)
}

// ShadowAll matches everything the node's shadows publish.
func (s Subjects) ShadowAll() string { return s.prefix + "." + tokShadow + ".>" }

// ShadowStreamConfig is the stream of the node's shadow outputs: an hour,
// bounded in bytes, like the history streams.
func ShadowStreamConfig(node string, replicas int) jetstream.StreamConfig {
	if replicas < 1 {
		replicas = 1
	}
	return jetstream.StreamConfig{
		Name:        StreamName(node, StreamShadow),
		Description: fmt.Sprintf("Splitlet v1 shadow stages' outputs of node %s", node),
		Subjects:    []string{For(node).ShadowAll()},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		MaxAge:      time.Hour,
		MaxBytes:    StreamMaxBytes,
		Discard:     jetstream.DiscardOld,
		Duplicates:  DuplicateWindow,
		Replicas:    replicas,
	}
}

// EnsureShadowStream makes the shadow stream, or brings it to the
// contract's settings; one that conforms is left alone (a shadow's
// identity may only read its info). replicas 0 keeps an existing stream's
// count.
func EnsureShadowStream(ctx context.Context, js jetstream.JetStream, node string, replicas int) error {
	cfg := ShadowStreamConfig(node, replicas)
	if s, err := js.Stream(ctx, cfg.Name); err == nil {
		have := s.CachedInfo().Config
		if replicas < 1 {
			cfg.Replicas = have.Replicas
		}
		if conforms(have, cfg) {
			return nil
		}
	}
	if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("bus: ensure stream %s: %w", cfg.Name, err)
	}
	return nil
}

// ShadowStreams is what a shadow of stage reads: the live stage's streams
// with its durables renamed (ShadowDurable), but the pod workers' partition
// leases (a shadow pod worker holds every partition in its own view and
// takes none from the live replicas).
func ShadowStreams(stage, node string) []StreamUse {
	var out []StreamUse
	for _, u := range StageStreams(stage, node) {
		if u.Stream == "KV_"+LeaseBucket(node) {
			continue
		}
		u.Durables = slices.Clone(u.Durables)
		for j, d := range u.Durables {
			u.Durables[j] = ShadowDurable(d)
		}
		out = append(out, u)
	}
	return out
}

// ShadowPermissions are the permissions of stage's shadow identity: read
// what the live stage reads (through its own durables; for the pod workers,
// not their partition leases), publish on its shadow prefix alone (and, for
// the prober, its exec probes, which the pod workers run only when they are
// the pod's own probe commands).
func ShadowPermissions(stage, node string) (Permissions, error) {
	if !slices.Contains(ShadowStages, stage) {
		return Permissions{}, fmt.Errorf("bus: stage %q has no shadow mode (%s have)", stage, strings.Join(ShadowStages, ", "))
	}
	s := For(node)
	id := ShadowIdentity(stage)
	var p Permissions
	p.Publish = append(p.Publish, "$JS.API.INFO")
	for _, what := range []string{StreamPodUpdates, StreamPodStatus, StreamProbes, StreamState, StreamShadow} {
		p.Publish = append(p.Publish, "$JS.API.STREAM.INFO."+StreamName(node, what))
	}
	p.Publish = append(p.Publish, s.Shadow(stage).All())
	if stage == StageProber {
		p.Publish = append(p.Publish, s.prefix+"."+tokRuntime+"."+tokProbeExec+".*")
	}
	p.Subscribe = append(p.Subscribe, InboxPrefix(id)+".>", "$SRV.>", s.Status(id))
	p.Responses = true
	for _, u := range ShadowStreams(stage, node) {
		p.Publish = append(p.Publish, readStream(u)...)
		if u.Ordered {
			p.PublishDeny = append(p.PublishDeny, othersDurables(id, node, u.Stream)...)
		}
	}
	return p, nil
}
