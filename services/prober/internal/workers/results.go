package workers

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
)

// Sink receives a probe result whenever a worker's result for a container
// changes. It is called from worker goroutines and must not block.
type Sink func(bus.ProbeResult)

type resultKey struct {
	probe       bus.ProbeType
	containerID string
}

// results is the cache of the last result per probe type and container ID
// (kubelet: results.Manager, one per probe type). Only a change reaches the
// sink.
type results struct {
	mu   sync.RWMutex
	last map[resultKey]bus.ProbeOutcome
	sink Sink
}

func newResults(sink Sink) *results {
	return &results{last: map[resultKey]bus.ProbeOutcome{}, sink: sink}
}

func (r *results) get(t bus.ProbeType, containerID string) (bus.ProbeOutcome, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	v, ok := r.last[resultKey{t, containerID}]
	return v, ok
}

// set records a result and sends it on if it differs from the cached one.
// Calls for one key come from one worker at a time, so what reaches the
// sink for a key is in order.
func (r *results) set(t bus.ProbeType, uid types.UID, namespace, name, container, containerID string, v bus.ProbeOutcome, message string) {
	k := resultKey{t, containerID}
	r.mu.Lock()
	prev, ok := r.last[k]
	if ok && prev == v {
		r.mu.Unlock()
		return
	}
	r.last[k] = v
	r.mu.Unlock()
	if v != bus.ProbeFailure {
		message = ""
	}
	if r.sink != nil {
		r.sink(bus.ProbeResult{
			PodUID: uid, Namespace: namespace, Name: name, Container: container,
			ContainerID: containerID, Probe: t, Result: v, Message: truncate(message, maxMessage),
		})
	}
}

func (r *results) remove(t bus.ProbeType, containerID string) {
	r.mu.Lock()
	delete(r.last, resultKey{t, containerID})
	r.mu.Unlock()
}

// maxMessage bounds the message carried on the bus.
const maxMessage = 1024

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
