package podworker

import "k8s.io/apimachinery/pkg/types"

// allowStaticPodStart says whether the static pod uid may start (kubelet:
// allowStaticPodStart): only when no other static pod of its full name was
// started and has not finished (a changed manifest is a new UID, which
// waits for the old pod to terminate within its grace), and only when it
// is the first of the name still waiting. Call with w.mu held.
func (w *Workers) allowStaticPodStart(fullname string, uid types.UID) bool {
	if started, ok := w.startedStatic[fullname]; ok {
		return started == uid
	}
	waiting := w.waitingStatic[fullname]
	for i, next := range waiting {
		s, ok := w.pods[next]
		if !ok || s.terminationRequested() || s.detached {
			continue // gone, or stopping before it started
		}
		if next != uid {
			w.waitingStatic[fullname] = waiting[i:]
			return false
		}
		waiting = waiting[i+1:]
		break
	}
	if len(waiting) > 0 {
		w.waitingStatic[fullname] = waiting
	} else {
		delete(w.waitingStatic, fullname)
	}
	w.startedStatic[fullname] = uid
	return true
}

// releaseStatic lets the next static pod of the name start once uid, if it
// was the started one, has finished or was forgotten. Call with w.mu held.
func (w *Workers) releaseStatic(fullname string, uid types.UID) {
	if w.startedStatic[fullname] == uid {
		delete(w.startedStatic, fullname)
	}
}
