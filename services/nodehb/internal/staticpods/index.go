// Package staticpods follows podconfig's StaticPods (state.static): the
// node's static pods by full name. The kubelet API takes an API pod for a
// static pod's mirror only when podconfig holds a static pod of the same
// namespace and name whose UID the pod's kubernetes.io/config.mirror
// annotation names (kubelet: the pod manager pairs a mirror pod with its
// static pod by full name), so that an annotation a pod's author set never
// selects another pod.
package staticpods

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/logging"
)

// Index is the node's static pods as podconfig last announced them. Until
// the first announcement it holds none.
type Index struct {
	log     *zap.Logger
	metrics *bus.Metrics
	mu      sync.RWMutex
	byName  map[string]types.UID // namespace/name → UID
	path    string               // podconfig's static pod path
}

// New returns an empty index; m (nil: none) counts its follower's
// deliveries.
func New(log *zap.Logger, m *bus.Metrics) *Index {
	if log == nil {
		log = zap.NewNop()
	}
	return &Index{log: log, metrics: m, byName: map[string]types.UID{}}
}

// Set replaces the index with an announcement.
func (x *Index) Set(sp *bus.StaticPods) {
	byName := make(map[string]types.UID, len(sp.Pods))
	for _, p := range sp.Pods {
		byName[p.Namespace+"/"+p.Name] = p.UID
	}
	x.mu.Lock()
	x.byName, x.path = byName, sp.Path
	x.mu.Unlock()
}

// Path is where podconfig reads static pod manifests, as it last announced
// it; "" when it has no file source or has not announced yet.
func (x *Index) Path() string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.path
}

// UID is the UID of the static pod namespace/name; ok is false when
// podconfig holds no static pod of that full name.
func (x *Index) UID(namespace, name string) (types.UID, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	uid, ok := x.byName[namespace+"/"+name]
	return uid, ok
}

// Run follows state.static from its last value until ctx ends, waiting
// (with a growing delay) while the state stream is not there.
func (x *Index) Run(ctx context.Context, js jetstream.JetStream, node string) {
	subject := bus.For(node).StaticPods()
	log := x.log.With(zap.String(logging.FieldSubject, subject))
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(min(time.Duration(attempt)*500*time.Millisecond, 5*time.Second)):
			}
		}
		f, err := bus.Follow(ctx, js, bus.FollowOptions{
			Stream:  bus.StreamName(node, bus.StreamState),
			Name:    "nodehb-static-pods",
			Filters: []string{subject},
			Logger:  log,
			Metrics: x.metrics,
		}, func(_ context.Context, _ string, e *bus.Envelope) error {
			sp, err := bus.DecodeStaticPods(e)
			if err != nil {
				log.Warn("malformed StaticPods dropped", zap.Error(err))
				return nil
			}
			x.Set(sp)
			log.Debug("static pods", zap.Int("pods", len(sp.Pods)))
			return nil
		})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn("static pods follower not ready, retrying", zap.Error(err))
			continue
		}
		<-ctx.Done()
		f.Stop()
		return
	}
}
