// Package shadowrt is the runtime of a shadow pod worker (docs/bus.md,
// "Shadow stages"): it changes nothing on the node. What it reports is the
// live runtime as the live pod workers report it (their PodRuntimeStatus on
// the podstatus stream, fed in with Observe), and each write the shadow
// decides on (start a container, stop one, remove a pod) is recorded and
// not carried out: the call waits until the live runtime shows the same
// change (the live pod worker made the same decision), and fails if it does
// not within the wait.
package shadowrt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/services/podworkers/internal/podsync"
)

// ErrRefused is what the requests a shadow must not carry out (exec,
// logs) fail with.
var ErrRefused = errors.New("shadow: the shadow pod worker runs nothing in containers")

// DefaultWait is how long a decision waits for the live runtime to show it.
const DefaultWait = 30 * time.Second

// Decision counts, by verb (Start, Stop, Remove).
const (
	Start  = "Start"
	Stop   = "Stop"
	Remove = "Remove"
)

// Runtime is the shadow's view of the live runtime.
type Runtime struct {
	typ  string
	wait time.Duration
	log  *zap.Logger

	mu sync.Mutex
	// pods are the live pod workers' last statuses, by pod.
	pods map[types.UID]*bus.PodRuntimeStatus
	// removed are pods the shadow removed: their exited containers are
	// forgotten, as a live runtime forgets them, until the live pod
	// workers report the pod again with a container that runs.
	removed map[types.UID]bool
	// changed is closed (and replaced) on each Observe.
	changed   chan struct{}
	decisions map[string]int
	events    chan runtime.Event
	closed    bool
}

// New returns a view of a live runtime of type typ (the type the live pod
// workers run: the pod workers' choices that depend on it, the sim
// runtime's lack of Events say, are the same); wait <= 0 is DefaultWait.
func New(typ string, wait time.Duration, log *zap.Logger) *Runtime {
	if wait <= 0 {
		wait = DefaultWait
	}
	return &Runtime{typ: typ, wait: wait, log: log, pods: map[types.UID]*bus.PodRuntimeStatus{}, removed: map[types.UID]bool{},
		changed: make(chan struct{}), decisions: map[string]int{}, events: make(chan runtime.Event, 4096)}
}

// Observe takes a live pod worker's status of a pod: from now on the pod's
// containers are what it lists. A container it reported running and that
// has exited now is announced on Events, as a runtime announces an exit.
func (r *Runtime) Observe(st *bus.PodRuntimeStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	old := r.pods[st.UID]
	r.pods[st.UID] = st
	now := podsync.Instances(st)
	if r.removed[st.UID] {
		for _, c := range now {
			if c.State == runtime.StateRunning || c.State == runtime.StateCreated {
				delete(r.removed, st.UID)
				break
			}
		}
	}
	if old != nil {
		state := map[string]runtime.State{}
		for _, c := range now {
			state[c.ID] = c.State
		}
		for _, c := range podsync.Instances(old) {
			if c.State == runtime.StateRunning && state[c.ID] == runtime.StateExited {
				select {
				case r.events <- runtime.Event{PodUID: st.UID, ContainerID: c.ID, State: runtime.StateExited}:
				default:
					r.log.Warn("shadow runtime: event queue full, an exit is dropped", zap.String("uid", string(st.UID)))
				}
			}
		}
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

// Decisions counts the writes the shadow decided on, by verb.
func (r *Runtime) Decisions() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.decisions))
	for k, v := range r.decisions {
		out[k] = v
	}
	return out
}

// decide records a write and waits until the live runtime shows it (done
// true), or the wait ends.
func (r *Runtime) decide(ctx context.Context, verb string, uid types.UID, what string, done func() bool) error {
	r.mu.Lock()
	r.decisions[verb]++
	r.mu.Unlock()
	r.log.Debug("shadow: decision recorded, not carried out", zap.String("verb", verb), zap.String("uid", string(uid)), zap.String("what", what))
	timer := time.NewTimer(r.wait)
	defer timer.Stop()
	for {
		r.mu.Lock()
		ok, changed := done(), r.changed
		r.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return fmt.Errorf("shadow: %s %s: the live pod workers did not do it within %v", verb, what, r.wait)
		}
	}
}

// find is the pod's container instance that matches (under r.mu).
func (r *Runtime) find(uid types.UID, match func(runtime.ContainerStatus) bool) (runtime.ContainerStatus, bool) {
	if r.removed[uid] {
		return runtime.ContainerStatus{}, false
	}
	for _, c := range podsync.Instances(r.pods[uid]) {
		if match(c) {
			return c, true
		}
	}
	return runtime.ContainerStatus{}, false
}

// Type is the live runtime's type; Version says it is a shadow's view.
func (r *Runtime) Type() string    { return r.typ }
func (r *Runtime) Version() string { return "shadow" }

// PodIP is the IP the live pod workers reported for the pod.
func (r *Runtime) PodIP(pod *corev1.Pod) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.pods[pod.UID]; st != nil {
		return st.PodIP
	}
	return ""
}

// StartContainer records the start and returns the instance the live
// runtime then shows: the container of that name and attempt.
func (r *Runtime) StartContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, attempt int, _ runtime.StartOptions) (runtime.ContainerStatus, error) {
	var got runtime.ContainerStatus
	match := func(s runtime.ContainerStatus) bool { return s.Name == c.Name && s.Attempt == attempt }
	err := r.decide(ctx, Start, pod.UID, fmt.Sprintf("container %s attempt %d of %s/%s", c.Name, attempt, pod.Namespace, pod.Name), func() bool {
		s, ok := r.find(pod.UID, match)
		got = s
		return ok && s.State != runtime.StateCreated
	})
	if err != nil {
		return runtime.ContainerStatus{PodUID: pod.UID, Name: c.Name, Attempt: attempt, State: runtime.StateExited, Reason: "ContainerCannotRun", Message: err.Error()}, err
	}
	return got, nil
}

// StopContainer records the stop and returns once the live runtime shows
// the instance stopped (or no more).
func (r *Runtime) StopContainer(ctx context.Context, id string, grace time.Duration) error {
	var uid types.UID
	r.mu.Lock()
	for u, st := range r.pods {
		for _, c := range podsync.Instances(st) {
			if c.ID == id {
				uid = u
			}
		}
	}
	r.mu.Unlock()
	return r.decide(ctx, Stop, uid, fmt.Sprintf("container %s (grace %v)", id, grace), func() bool {
		s, ok := r.find(uid, func(s runtime.ContainerStatus) bool { return s.ID == id })
		return !ok || s.State == runtime.StateExited
	})
}

// PodContainers are the pod's container instances the live pod workers
// last reported.
func (r *Runtime) PodContainers(uid types.UID) []runtime.ContainerStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.removed[uid] {
		return nil
	}
	return podsync.Instances(r.pods[uid])
}

// RemovePod records the removal; the pod's exited containers are forgotten
// from the shadow's view (their files are the live runtime's).
func (r *Runtime) RemovePod(ctx context.Context, uid types.UID) error {
	err := r.decide(ctx, Remove, uid, "pod "+string(uid), func() bool { return true })
	r.mu.Lock()
	r.removed[uid] = true
	r.mu.Unlock()
	return err
}

// Events announces the exits the live pod workers reported.
func (r *Runtime) Events() <-chan runtime.Event { return r.events }

// Logs is refused: the shadow serves no runtime requests.
func (r *Runtime) Logs(context.Context, types.UID, string, runtime.LogOptions, io.Writer) error {
	return ErrRefused
}

// Exec is refused: a shadow runs nothing in a container (exec probes are
// the live pod workers' to run).
func (r *Runtime) Exec(context.Context, types.UID, string, []string, io.Reader, time.Duration) (runtime.ExecResult, error) {
	return runtime.ExecResult{ExitCode: -1}, ErrRefused
}

// Stats are none: the shadow measures nothing.
func (r *Runtime) Stats(types.UID) []runtime.ContainerStats { return nil }

// Close ends Events.
func (r *Runtime) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		close(r.events)
	}
	return nil
}
