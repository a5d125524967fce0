package runtime

import (
	"fmt"
	"iter"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// InstancesKept is how many instances of one container a runtime keeps,
// the newest ones: the running one and the one before it, whose logs
// `kubectl logs --previous` reads (kubelet: container GC keeps the newest
// dead instances per container). Older exited instances are dropped.
const InstancesKept = 2

// Excess lists, from one container's instances oldest first, the exited
// ones beyond the newest InstancesKept: what a runtime drops after a new
// instance of that container appears.
func Excess[C any](instances []C, status func(C) *ContainerStatus) []C {
	var out []C
	for i := 0; i < len(instances)-InstancesKept; i++ {
		if status(instances[i]).State == StateExited {
			out = append(out, instances[i])
		}
	}
	return out
}

// PodTable is the bookkeeping a runtime that holds its containers itself
// keeps (sim, process): the pods it holds, each with its container
// instances oldest first, and the instances by ID. C is the runtime's own
// instance type; status reads the instance's ContainerStatus. A PodTable
// does no locking: its runtime guards it with its own mutex.
type PodTable[C comparable] struct {
	status func(C) *ContainerStatus
	pods   map[types.UID]*TablePod[C]
	byID   map[string]C
}

// TablePod is one pod of a PodTable.
type TablePod[C comparable] struct {
	Namespace, Name string
	// Instances of the pod's containers, oldest first.
	Instances []C
}

// NewPodTable returns an empty table.
func NewPodTable[C comparable](status func(C) *ContainerStatus) *PodTable[C] {
	return &PodTable[C]{status: status, pods: map[types.UID]*TablePod[C]{}, byID: map[string]C{}}
}

// Pod is the pod's entry, nil when the table does not hold it.
func (t *PodTable[C]) Pod(uid types.UID) *TablePod[C] { return t.pods[uid] }

// SetResources records what a running instance was resized to.
func (t *PodTable[C]) SetResources(id string, res corev1.ResourceRequirements) error {
	c, ok := t.byID[id]
	if !ok {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	st := t.status(c)
	if st.State != StateRunning {
		return fmt.Errorf("container %s is not running", id)
	}
	st.Resources = &res
	return nil
}

// ByID finds an instance by its container ID.
func (t *PodTable[C]) ByID(id string) (C, bool) {
	c, ok := t.byID[id]
	return c, ok
}

// All yields every instance the table holds.
func (t *PodTable[C]) All() iter.Seq[C] {
	return func(yield func(C) bool) {
		for _, c := range t.byID {
			if !yield(c) {
				return
			}
		}
	}
}

// Add appends an instance to its pod (made when new; namespace and name
// are set when given) and returns the exited instances of the same
// container beyond the newest InstancesKept, which it drops.
func (t *PodTable[C]) Add(uid types.UID, namespace, name string, c C) (dropped []C) {
	pd := t.pods[uid]
	if pd == nil {
		pd = &TablePod[C]{}
		t.pods[uid] = pd
	}
	if namespace != "" || name != "" {
		pd.Namespace, pd.Name = namespace, name
	}
	pd.Instances = append(pd.Instances, c)
	st := t.status(c)
	t.byID[st.ID] = c
	return t.trim(pd, st.Name)
}

// trim drops the excess instances of one container of pd. A container
// with no more instances than are kept (every first start) costs no
// allocation.
func (t *PodTable[C]) trim(pd *TablePod[C], name string) []C {
	n := 0
	for _, c := range pd.Instances {
		if t.status(c).Name == name {
			n++
		}
	}
	if n <= InstancesKept {
		return nil
	}
	same := make([]C, 0, n)
	for _, c := range pd.Instances {
		if t.status(c).Name == name {
			same = append(same, c)
		}
	}
	drop := Excess(same, t.status)
	if len(drop) == 0 {
		return nil
	}
	gone := make(map[C]bool, len(drop))
	for _, c := range drop {
		gone[c] = true
		delete(t.byID, t.status(c).ID)
	}
	kept := pd.Instances[:0]
	for _, c := range pd.Instances {
		if !gone[c] {
			kept = append(kept, c)
		}
	}
	clear(pd.Instances[len(kept):])
	pd.Instances = kept
	return drop
}

// Statuses are the pod's instances' statuses, oldest first (the
// runtime's PodContainers); nil for a pod it does not hold.
func (t *PodTable[C]) Statuses(uid types.UID) []ContainerStatus {
	pd := t.pods[uid]
	if pd == nil {
		return nil
	}
	out := make([]ContainerStatus, len(pd.Instances))
	for i, c := range pd.Instances {
		out[i] = *t.status(c)
	}
	return out
}

// Refs lists the pods the table holds (the runtime's PodLister), in no
// particular order.
func (t *PodTable[C]) Refs() []PodRef {
	out := make([]PodRef, 0, len(t.pods))
	for uid, pd := range t.pods {
		out = append(out, PodRef{UID: uid, Namespace: pd.Namespace, Name: pd.Name})
	}
	return out
}

// Find is the newest instance of the named container, or with previous the
// one before it.
func (t *PodTable[C]) Find(uid types.UID, name string, previous bool) (C, error) {
	pd := t.pods[uid]
	if pd == nil {
		var zero C
		return zero, fmt.Errorf("%w: pod %s", ErrNotFound, uid)
	}
	return FindInstance(uid, pd.Instances, func(c C) string { return t.status(c).Name }, name, previous)
}

// Busy is the first instance of the pod for which busy says so (one that
// still runs, say), for a runtime that refuses to remove such a pod.
func (t *PodTable[C]) Busy(uid types.UID, busy func(*ContainerStatus) bool) (C, bool) {
	var zero C
	pd := t.pods[uid]
	if pd == nil {
		return zero, false
	}
	for _, c := range pd.Instances {
		if busy(t.status(c)) {
			return c, true
		}
	}
	return zero, false
}

// Remove drops the pod and returns its instances.
func (t *PodTable[C]) Remove(uid types.UID) []C {
	pd := t.pods[uid]
	if pd == nil {
		return nil
	}
	for _, c := range pd.Instances {
		delete(t.byID, t.status(c).ID)
	}
	delete(t.pods, uid)
	return pd.Instances
}
