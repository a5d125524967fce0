package process

import (
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/runtime"
)

// What a restored instance that was running says of itself: it died with
// the replica that ran it (kubelet: a container that used to be Running
// and can no longer be found).
const (
	ReasonStatusUnknown  = "ContainerStatusUnknown"
	MessageStatusUnknown = "The container could not be located when the pod was deleted.  The container used to be Running"
	exitCodeUnknown      = 137
)

// Restore implements runtime.Restorer. A process container cannot outlive
// the replica that ran it, so the restored instances are the record of
// what ran: an exited one keeps its exit code, reason and times; one that
// was running (or being started) is over, with exit code 137 and reason
// ContainerStatusUnknown. The pod worker then restarts it as the restart
// policy says, one restart higher, with the lost instance as its last
// state: the restart is visible, never hidden.
func (r *Runtime) Restore(p *corev1.Pod, instances []runtime.ContainerStatus) error {
	if p == nil || p.UID == "" {
		return errors.New("process: Restore needs a pod with a UID")
	}
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if r.Table.Pod(p.UID) != nil || len(instances) == 0 {
		return nil
	}
	now := time.Now()
	for _, st := range instances {
		if _, known := r.Table.ByID(st.ID); st.ID == "" || st.Name == "" || known {
			continue
		}
		st.PodUID = p.UID
		if st.State != runtime.StateExited {
			st.State, st.ExitCode = runtime.StateExited, exitCodeUnknown
			st.Reason, st.Message = ReasonStatusUnknown, MessageStatusUnknown
			st.FinishedAt = now
		}
		done := make(chan struct{})
		close(done)
		ct := &container{status: st, done: done, reaped: true}
		r.Table.Add(p.UID, p.Namespace, p.Name, ct)
	}
	return nil
}

// Forget implements runtime.Restorer: the pod's instances are dropped (a
// hand-over stopped its containers first; the next owner restores the
// record).
func (r *Runtime) Forget(uid types.UID) {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	r.Table.Remove(uid)
}
