// Package podheap measures what a stage's copies of pods weigh: the heap a
// cache keeps per pod, for the benchmarks that compare whole pods with the
// views stages keep of them.
package podheap

import (
	"encoding/json"
	"runtime"

	corev1 "k8s.io/api/core/v1"
)

// RetainedPerPod decodes each document as a pod, as a watch or the bus
// would, hands it to keep, and returns the live heap (after a GC) that
// what keep returned holds, per pod.
func RetainedPerPod(docs [][]byte, keep func(*corev1.Pod) any) uint64 {
	held := make([]any, len(docs))
	var before, after runtime.MemStats
	// Twice: what sync.Pools held survives one collection (their victim
	// caches) and would be freed inside the measurement.
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i, doc := range docs {
		p := &corev1.Pod{}
		if err := json.Unmarshal(doc, p); err != nil {
			panic(err)
		}
		held[i] = keep(p)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	// the documents are the caller's: counted in both readings.
	runtime.KeepAlive(held)
	runtime.KeepAlive(docs)
	if after.HeapAlloc < before.HeapAlloc {
		return 0
	}
	return (after.HeapAlloc - before.HeapAlloc) / uint64(len(docs))
}
