package bus

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// SetParts cuts the pods of a SET into n SETPART payloads of one snapshot
// (id), in order; n is at most the number of pods.
func SetParts(pods []corev1.Pod, n int, id string) []PodUpdate {
	n = min(max(n, 2), max(len(pods), 2))
	out := make([]PodUpdate, n)
	for i := range n {
		lo, hi := i*len(pods)/n, (i+1)*len(pods)/n
		out[i] = PodUpdate{Pods: pods[lo:hi], Snapshot: &SnapshotPart{ID: id, Part: i + 1, Parts: n}}
	}
	return out
}

// Snapshots puts the SETPART messages of each subject and source back
// together. A receiver passes every PodUpdate through Resolve and applies
// what it returns: other operations at once, a SET sent in parts when its
// last part has come. Parts arrive in order on their subject; a snapshot
// with a part missing (a receiver that started in its middle) is dropped,
// and the next periodic SET brings the source's pods again.
type Snapshots struct {
	mu      sync.Mutex
	pending map[snapshotKey]*partial
}

type snapshotKey struct{ subject, source string }

type partial struct {
	id   string
	next int
	pods []corev1.Pod
}

// NewSnapshots returns an empty assembler.
func NewSnapshots() *Snapshots { return &Snapshots{pending: map[snapshotKey]*partial{}} }

// Resolve returns the operation and pods to apply for a decoded PodUpdate:
// its own for any operation but SETPART; for a SETPART, apply is false
// until the snapshot's last part, which returns OpSet with every part's pods.
func (s *Snapshots) Resolve(subject string, e *Envelope, u *PodUpdate) (op Op, pods []corev1.Pod, apply bool) {
	if e.Op != OpSetPart {
		return e.Op, u.Pods, true
	}
	k := snapshotKey{subject, e.Source}
	sp := u.Snapshot
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pending[k]
	if sp.Part == 1 {
		p = &partial{id: sp.ID, next: 1}
		s.pending[k] = p
	}
	if p == nil || p.id != sp.ID || p.next != sp.Part {
		// a part out of its snapshot's order: the snapshot is incomplete.
		delete(s.pending, k)
		return "", nil, false
	}
	p.pods = append(p.pods, u.Pods...)
	p.next++
	if sp.Part < sp.Parts {
		return "", nil, false
	}
	delete(s.pending, k)
	return OpSet, p.pods, true
}
