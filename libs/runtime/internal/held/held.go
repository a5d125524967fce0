// Package held is the part the runtimes that hold their containers
// themselves (sim, process) share: the table of their pods and container
// instances, the lock that guards it, their event queue, and the
// runtime.Runtime methods that only read these. A runtime embeds
// *Containers.
package held

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/internal/eventq"
)

// Containers holds a runtime's container instances, of its own type C.
type Containers[C comparable] struct {
	// Mu guards Table and the fields of the instances in it.
	Mu    sync.Mutex
	Table *runtime.PodTable[C]
	// Queue carries the runtime's events (Events).
	Queue *eventq.Queue
	podIP string
}

// New holds no container yet; status reads an instance's status, and podIP
// is the IP every pod gets.
func New[C comparable](status func(C) *runtime.ContainerStatus, podIP string) *Containers[C] {
	return &Containers[C]{Table: runtime.NewPodTable(status), Queue: eventq.New(), podIP: podIP}
}

// PodIP implements runtime.Runtime.
func (h *Containers[C]) PodIP(*corev1.Pod) string { return h.podIP }

// Events implements runtime.Runtime.
func (h *Containers[C]) Events() <-chan runtime.Event { return h.Queue.C() }

// PodContainers implements runtime.Runtime.
func (h *Containers[C]) PodContainers(uid types.UID) []runtime.ContainerStatus {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	return h.Table.Statuses(uid)
}

// Pods implements runtime.PodLister: the pods held, started here or
// restored.
func (h *Containers[C]) Pods() []runtime.PodRef {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	return h.Table.Refs()
}

// UpdateContainerResources implements runtime.Resizer: the new figures are
// recorded (these runtimes enforce none).
func (h *Containers[C]) UpdateContainerResources(_ context.Context, id string, res corev1.ResourceRequirements) error {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	return h.Table.SetResources(id, res)
}
