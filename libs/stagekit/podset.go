package stagekit

import (
	"context"
	"sync"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/logging"
)

// podSet is the set of pods the sources list, each with the source that sent
// it last and its partition, and the stage's handler it tells of changes.
type podSet struct {
	handler   PodHandler
	decode    bus.PodDecoder
	log       *zap.Logger
	snapshots *bus.Snapshots

	mu   sync.Mutex
	pods map[types.UID]member
}

type member struct {
	source    string
	partition int
}

func newPodSet(h PodHandler, decode bus.PodDecoder, log *zap.Logger) *podSet {
	return &podSet{handler: h, decode: decode, log: log, snapshots: bus.NewSnapshots(), pods: map[types.UID]member{}}
}

// handlePodUpdate applies one PodUpdate (the pod updates consumer's
// handler; bus.Consume has dropped it already if its seq is stale).
func (s *podSet) handlePodUpdate(_ context.Context, subject string, e *bus.Envelope) error {
	u, err := bus.DecodePodUpdateWith(e, s.decode)
	if err != nil {
		// A payload that does not decode will not decode next time either.
		s.log.Error("dropping a pod update that does not decode", zap.String(logging.FieldSubject, subject), zap.Error(err))
		return nil
	}
	// a SET too large for one message comes as SETPARTs: applied whole.
	op, pods, apply := s.snapshots.Resolve(subject, e, u)
	if !apply {
		return nil
	}
	part, ok := bus.PartitionOf(subject)
	switch op {
	case bus.OpRemove:
		for i := range pods {
			s.remove(pods[i].UID)
		}
	case bus.OpSet:
		if !ok {
			s.log.Error("SET on a subject without a partition", zap.String(logging.FieldSubject, subject))
			return nil
		}
		s.replace(e.Source, part, pods)
	default:
		for i := range pods {
			s.upsert(e.Source, part, &pods[i])
		}
	}
	return nil
}

// replace applies a SET: the source's pods of the partition are exactly
// pods; the others it held there are removed.
func (s *podSet) replace(source string, part int, pods []corev1.Pod) {
	listed := make(map[types.UID]bool, len(pods))
	for i := range pods {
		listed[pods[i].UID] = true
	}
	var gone []types.UID
	s.mu.Lock()
	for uid, m := range s.pods {
		if m.source == source && m.partition == part && !listed[uid] {
			gone = append(gone, uid)
		}
	}
	s.mu.Unlock()
	for _, uid := range gone {
		s.remove(uid)
	}
	for i := range pods {
		s.upsert(source, part, &pods[i])
	}
}

func (s *podSet) upsert(source string, part int, pod *corev1.Pod) {
	s.mu.Lock()
	_, known := s.pods[pod.UID]
	s.pods[pod.UID] = member{source, part}
	s.mu.Unlock()
	if known {
		s.handler.PodUpdated(source, pod)
	} else {
		s.handler.PodAdded(source, pod)
	}
}

func (s *podSet) remove(uid types.UID) {
	s.mu.Lock()
	delete(s.pods, uid)
	s.mu.Unlock()
	s.handler.PodRemoved(uid)
}

// Len is how many pods the set holds.
func (k *Kit) Len() int {
	k.set.mu.Lock()
	defer k.set.mu.Unlock()
	return len(k.set.pods)
}

// Has reports whether the set holds the pod.
func (k *Kit) Has(uid types.UID) bool {
	k.set.mu.Lock()
	defer k.set.mu.Unlock()
	_, ok := k.set.pods[uid]
	return ok
}
