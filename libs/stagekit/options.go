package stagekit

import (
	"time"

	"go.uber.org/zap"

	"github.com/splitlet/splitlet/libs/bus"
)

// Option configures a Kit.
type Option func(*Kit)

// WithLogger sets the logger.
func WithLogger(l *zap.Logger) Option { return func(k *Kit) { k.log = l } }

// WithMetrics has the kit's consumers counted in m (the process's bus
// metrics).
func WithMetrics(m *bus.Metrics) Option { return func(k *Kit) { k.metrics = m } }

// WithStatus has the kit consume the runtime statuses too and hand them to h.
func WithStatus(h StatusHandler) Option { return func(k *Kit) { k.status = h } }

// WithShadow runs the kit for a shadow of the stage (docs/experiments.md):
// durables of its own (bus.ShadowDurable), removed an hour after the shadow
// stops, and the shadow stream ensured.
func WithShadow(shadow bool) Option { return func(k *Kit) { k.shadow = shadow } }

// WithReplicas sets the replica count the node's streams are made with
// (nats-replicas; 0 or 1 on a single server).
func WithReplicas(n int) Option { return func(k *Kit) { k.replicas = n } }

// WithDurables names the durable consumers of the pod updates and the
// statuses (default: the prober's, bus.DurableProberPodUpdates and
// bus.DurableProberPodStatus).
func WithDurables(podUpdates, podStatus string) Option {
	return func(k *Kit) { k.durables = durables{podUpdates, podStatus} }
}

// WithRetryInterval sets the wait between attempts to set up the consumers
// (default 500 ms).
func WithRetryInterval(d time.Duration) Option { return func(k *Kit) { k.retry = d } }

// WithConsumerHook has each consumer made through hook, which may change its
// options and wrap its handler (tests).
func WithConsumerHook(hook ConsumerHook) Option { return func(k *Kit) { k.hook = hook } }

// WithPodDecoder has each pod of a protobuf pod update decoded by dec
// (bus.DecodePodUpdateWith): a stage that reads only part of some pods
// decodes only that part. The handler gets the pods as dec made them.
func WithPodDecoder(dec bus.PodDecoder) Option { return func(k *Kit) { k.decode = dec } }
