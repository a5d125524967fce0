// Package fakeruntime is a tiny in-memory runtime.Runtime for the pod
// workers' unit tests: containers run until the test makes them exit.
package fakeruntime

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/runtime"
)

// Runtime holds containers in memory.
type Runtime struct {
	mu     sync.Mutex
	pods   map[types.UID][]runtime.ContainerStatus
	next   int
	events chan runtime.Event
	// ExitOnStart, if set, makes a started container of that name exit at
	// once with the code.
	ExitOnStart map[string]int
	// Starts counts StartContainer calls per container name.
	Starts map[string]int
	// StopExitCode is the exit code StopContainer gives (default 137).
	StopExitCode int
	// CutShort, per container name, is how many of its starts leave the
	// container Created and fail (a start cut short after the create).
	CutShort map[string]int
	// Graces records the grace of each StopContainer, by container ID;
	// Stopped the names of the containers stopped, in order.
	Graces  map[string]time.Duration
	Stopped []string
	// ExecFails, by command line (arguments joined by spaces), makes
	// Exec report exit code 1; Execs lists every command run, in order.
	ExecFails map[string]bool
	Execs     []string
	// ExecUntilStopped, by command line, makes Exec run until its
	// container stops (exit code 137) or its context ends; ExecEnds says
	// which ended each such exec ("stopped" or "cancelled").
	ExecUntilStopped map[string]bool
	ExecEnds         map[string]string
	// LastOptions holds, by container name, the options of its last start.
	LastOptions map[string]runtime.StartOptions
	// SandboxFails, by pod UID, makes every start of the pod's containers
	// fail as a sandbox that could not be made does (waiting
	// ContainerCreating, runtime.SandboxFailed and the error).
	SandboxFails map[types.UID]string
}

// New returns an empty runtime.
func New() *Runtime {
	return &Runtime{pods: map[types.UID][]runtime.ContainerStatus{}, events: make(chan runtime.Event, 1024), ExitOnStart: map[string]int{}, Starts: map[string]int{}, CutShort: map[string]int{}, StopExitCode: 137, LastOptions: map[string]runtime.StartOptions{}}
}

func (r *Runtime) Type() string                 { return "fake" }
func (r *Runtime) Version() string              { return "0" }
func (r *Runtime) PodIP(*corev1.Pod) string     { return "127.0.0.1" }
func (r *Runtime) Events() <-chan runtime.Event { return r.events }
func (r *Runtime) Close() error                 { return nil }

func (r *Runtime) StartContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, attempt int, opts runtime.StartOptions) (runtime.ContainerStatus, error) {
	r.mu.Lock()
	r.LastOptions[c.Name] = opts
	r.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if msg, ok := r.SandboxFails[pod.UID]; ok {
		r.Starts[c.Name]++
		return runtime.ContainerStatus{PodUID: pod.UID, Name: c.Name, Attempt: attempt, State: runtime.StateExited,
			Reason: "ContainerCreating", Message: runtime.SandboxFailed + msg}, fmt.Errorf("fake: sandbox of %s: %s", pod.UID, msg)
	}
	r.next++
	now := time.Now()
	st := runtime.ContainerStatus{ID: fmt.Sprintf("fake://%d", r.next), PodUID: pod.UID, Name: c.Name, Attempt: attempt, Hash: runtime.ContainerHash(c),
		State: runtime.StateRunning, Image: c.Image, ImageID: "fake://" + c.Image, CreatedAt: now, StartedAt: now}
	r.Starts[c.Name]++
	if r.CutShort[c.Name] > 0 {
		r.CutShort[c.Name]--
		st.State, st.StartedAt = runtime.StateCreated, time.Time{}
		r.pods[pod.UID] = append(r.pods[pod.UID], st)
		return st, fmt.Errorf("fake: start of %s cut short", c.Name)
	}
	if code, ok := r.ExitOnStart[c.Name]; ok {
		st.State, st.ExitCode, st.FinishedAt = runtime.StateExited, code, now
		st.Reason = "Completed"
		if code != 0 {
			st.Reason = "Error"
		}
		defer r.emit(pod.UID, st.ID)
	}
	r.pods[pod.UID] = append(r.pods[pod.UID], st)
	return st, nil
}

func (r *Runtime) emit(uid types.UID, id string) {
	select {
	case r.events <- runtime.Event{PodUID: uid, ContainerID: id, State: runtime.StateExited}:
	default:
	}
}

// GraceOf is the grace of the last StopContainer of a container.
func (r *Runtime) GraceOf(id string) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g, ok := r.Graces[id]
	return g, ok
}

// StartsOf counts the starts of a container name.
func (r *Runtime) StartsOf(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.Starts[name]
}

// Exit makes the newest instance of the named container exit with code.
func (r *Runtime) Exit(uid types.UID, name string, code int) {
	r.mu.Lock()
	list := r.pods[uid]
	id := ""
	for i := len(list) - 1; i >= 0; i-- {
		if list[i].Name == name && list[i].State == runtime.StateRunning {
			list[i].State, list[i].ExitCode, list[i].FinishedAt = runtime.StateExited, code, time.Now()
			list[i].Reason = "Error"
			if code == 0 {
				list[i].Reason = "Completed"
			}
			id = list[i].ID
			break
		}
	}
	r.mu.Unlock()
	if id != "" {
		r.emit(uid, id)
	}
}

func (r *Runtime) StopContainer(ctx context.Context, id string, grace time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Graces == nil {
		r.Graces = map[string]time.Duration{}
	}
	r.Graces[id] = grace
	for _, list := range r.pods {
		for i := range list {
			if list[i].ID == id {
				if list[i].State == runtime.StateRunning {
					r.Stopped = append(r.Stopped, list[i].Name)
					list[i].State, list[i].ExitCode, list[i].FinishedAt, list[i].Reason = runtime.StateExited, r.StopExitCode, time.Now(), "Error"
				}
				return nil
			}
		}
	}
	return runtime.ErrNotFound
}

func (r *Runtime) PodContainers(uid types.UID) []runtime.ContainerStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]runtime.ContainerStatus(nil), r.pods[uid]...)
}

// Running counts running containers of every pod.
func (r *Runtime) Running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, list := range r.pods {
		for _, c := range list {
			if c.State == runtime.StateRunning {
				n++
			}
		}
	}
	return n
}

func (r *Runtime) RemovePod(ctx context.Context, uid types.UID) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pods, uid)
	return nil
}

func (r *Runtime) Logs(ctx context.Context, uid types.UID, container string, opts runtime.LogOptions, w io.Writer) error {
	_, err := io.WriteString(w, "fake log of "+container+"\n")
	return err
}

func (r *Runtime) Exec(ctx context.Context, uid types.UID, container string, cmd []string, stdin io.Reader, timeout time.Duration) (runtime.ExecResult, error) {
	line := strings.Join(cmd, " ")
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Execs = append(r.Execs, line)
	if r.ExecUntilStopped[line] {
		return r.execUntilStopped(ctx, uid, container, line)
	}
	if r.ExecFails[line] {
		return runtime.ExecResult{Stdout: []byte("failed: " + line), ExitCode: 1}, nil
	}
	return runtime.ExecResult{Stdout: []byte(fmt.Sprint(cmd))}, nil
}

// execUntilStopped polls, with r.mu held on entry and exit, until the
// container no longer runs or ctx ends.
func (r *Runtime) execUntilStopped(ctx context.Context, uid types.UID, container, line string) (runtime.ExecResult, error) {
	if r.ExecEnds == nil {
		r.ExecEnds = map[string]string{}
	}
	runs := func() bool {
		for _, c := range r.pods[uid] {
			if c.Name == container && c.State == runtime.StateRunning {
				return true
			}
		}
		return false
	}
	// A stop ends the exec with its container, before the stop returns: a
	// context cancelled after that finds the container stopped.
	for runs() {
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			r.mu.Lock()
			if runs() {
				r.ExecEnds[line] = "cancelled"
				return runtime.ExecResult{}, ctx.Err()
			}
		case <-time.After(5 * time.Millisecond):
			r.mu.Lock()
		}
	}
	r.ExecEnds[line] = "stopped"
	return runtime.ExecResult{ExitCode: 137}, nil
}

// ExecEnd says how an ExecUntilStopped command ended ("" while it runs).
func (r *Runtime) ExecEnd(line string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ExecEnds[line]
}

// StopOrder is the names of the containers stopped so far, in order.
func (r *Runtime) StopOrder() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.Stopped)
}

// Executed says whether a command line has run.
func (r *Runtime) Executed(line string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.Execs, line)
}

func (r *Runtime) Stats(uid types.UID) []runtime.ContainerStats { return nil }

var _ runtime.Runtime = (*Runtime)(nil)
