package podsync

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// terminationOrder holds a terminating pod's sidecars back (kubelet:
// terminationOrdering): every container is told to stop at once and runs
// its preStop hook at once, but a sidecar (a restartable init container)
// is stopped only after every app container, and after the sidecars
// declared after it, have stopped, or when the grace runs out.
type terminationOrder struct {
	mu sync.Mutex
	// stopped closes, per running container, once it has stopped.
	stopped map[string]chan struct{}
	// waits lists what a sidecar waits for.
	waits map[string][]chan struct{}
}

// newTerminationOrder builds the order of the pod's running containers.
func newTerminationOrder(pod *corev1.Pod, running map[string]bool) *terminationOrder {
	o := &terminationOrder{stopped: map[string]chan struct{}{}, waits: map[string][]chan struct{}{}}
	ch := func(name string) chan struct{} {
		c := make(chan struct{})
		if !running[name] {
			close(c) // nothing to wait for
		} else {
			o.stopped[name] = c
		}
		return c
	}
	var apps []chan struct{}
	for _, c := range pod.Spec.Containers {
		apps = append(apps, ch(c.Name))
	}
	var later chan struct{} // the sidecar declared after, stopping before
	for i := len(pod.Spec.InitContainers) - 1; i >= 0; i-- {
		c := &pod.Spec.InitContainers[i]
		done := ch(c.Name)
		if !isSidecar(c) {
			continue
		}
		o.waits[c.Name] = append(o.waits[c.Name], apps...)
		if later != nil {
			o.waits[c.Name] = append(o.waits[c.Name], later)
		}
		later = done
	}
	return o
}

// wait blocks until the container may stop, at most for grace, and returns
// how long it waited.
func (o *terminationOrder) wait(name string, grace time.Duration) time.Duration {
	if o == nil || grace <= 0 {
		return 0
	}
	start := time.Now()
	timer := time.NewTimer(grace)
	defer timer.Stop()
	for _, c := range o.waits[name] {
		select {
		case <-c:
		case <-timer.C:
			return time.Since(start)
		}
	}
	return time.Since(start)
}

// done records that the container has stopped.
func (o *terminationOrder) done(name string) {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if c, ok := o.stopped[name]; ok {
		close(c)
		delete(o.stopped, name)
	}
}
