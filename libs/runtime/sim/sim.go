package sim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/crilog"
	"github.com/splitlet/splitlet/libs/runtime/internal/held"
)

// Annotation names (see the package documentation).
const (
	AnnotationExitCode      = "sim.splitlet.io/exit-code"
	AnnotationExitAfter     = "sim.splitlet.io/exit-after"
	AnnotationStartError    = "sim.splitlet.io/start-error"
	AnnotationIgnoreSIGTERM = "sim.splitlet.io/ignore-sigterm"
	AnnotationExecExitCode  = "sim.splitlet.io/exec-exit-code"
	AnnotationExecStdout    = "sim.splitlet.io/exec-stdout"
	AnnotationExecAfter     = "sim.splitlet.io/exec-after"
)

// Type is the runtime's name; container IDs start with Type + "://".
const Type = "sim"

// Version of the simulated runtime.
const Version = "0.1.0"

// Container exit reasons (the kubelet's, as CRI runtimes report them).
const (
	ReasonCompleted   = "Completed"
	ReasonError       = "Error"
	ReasonCannotRun   = "ContainerCannotRun"
	ReasonConfigError = "CreateContainerConfigError"
	exitCodeCannotRun = 128
	exitCodeKilled    = 137
)

// Option configures a Runtime.
type Option func(*options)

type options struct {
	startLatency  time.Duration
	maxStarts     int
	podIP         string
	syntheticLogs bool
}

// WithStartLatency makes each start take d (default 0).
func WithStartLatency(d time.Duration) Option { return func(o *options) { o.startLatency = d } }

// WithMaxConcurrentStarts limits how many starts of this runtime (this
// replica) are under way at once; n <= 0 means no limit (the default).
func WithMaxConcurrentStarts(n int) Option { return func(o *options) { o.maxStarts = n } }

// WithPodIP sets the IP every pod gets (default 127.0.0.1).
func WithPodIP(ip string) Option {
	return func(o *options) {
		if ip != "" {
			o.podIP = ip
		}
	}
}

// WithSyntheticLogs turns the synthetic start/exit log lines on or off
// (default on).
func WithSyntheticLogs(on bool) Option { return func(o *options) { o.syntheticLogs = on } }

// Runtime is the simulated runtime. It implements runtime.Runtime.
type Runtime struct {
	opts   options
	starts chan struct{} // start slots; nil without a limit
	*held.Containers[*container]
	prefix string
	seq    atomic.Uint64
	// waiting counts starts waiting for a slot (tests look at it).
	waiting atomic.Int32
}

var (
	_ runtime.Runtime   = (*Runtime)(nil)
	_ runtime.Restorer  = (*Runtime)(nil)
	_ runtime.PodLister = (*Runtime)(nil)
)

// container is one container instance. Its fields are guarded by
// Runtime.mu. Kept small: a 10,000-pod replica holds one per container.
type container struct {
	status     runtime.ContainerStatus
	timer      *time.Timer
	exited     chan struct{} // made only when someone waits for the exit
	exec       *execSpec     // nil unless exec annotations are set
	ignoreTerm bool
}

type execSpec struct {
	exitCode int
	stdout   []byte
	after    time.Duration // the answer holds from this long after the start
}

// New builds a simulated runtime.
func New(opts ...Option) *Runtime {
	o := options{podIP: "127.0.0.1", syntheticLogs: true}
	for _, opt := range opts {
		opt(&o)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	r := &Runtime{
		opts:       o,
		Containers: held.New(func(c *container) *runtime.ContainerStatus { return &c.status }, o.podIP),
		prefix:     Type + "://" + hex.EncodeToString(b[:]),
	}
	if o.maxStarts > 0 {
		r.starts = make(chan struct{}, o.maxStarts)
	}
	return r
}

// Type implements runtime.Runtime.
func (r *Runtime) Type() string { return Type }

// Version implements runtime.Runtime.
func (r *Runtime) Version() string { return Version }

// Close implements runtime.Runtime: it stops the event queue and the planned
// exits (containers stay as they are).
func (r *Runtime) Close() error {
	r.Mu.Lock()
	for c := range r.Table.All() {
		if c.timer != nil {
			c.timer.Stop()
		}
	}
	r.Mu.Unlock()
	r.Queue.Close()
	return nil
}

// plan is what a pod's annotations say about one container.
type plan struct {
	exits      bool
	exitCode   int
	exitAfter  time.Duration
	startError string
	ignoreTerm bool
	exec       *execSpec
}

func annotation(pod *corev1.Pod, name, container string) (string, string, bool) {
	if v, ok := pod.Annotations[name+"."+container]; ok {
		return name + "." + container, v, true
	}
	v, ok := pod.Annotations[name]
	return name, v, ok
}

func parseExitCode(key, v string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 || n > 255 {
		return 0, fmt.Errorf("annotation %s: %q is not an exit code (0-255)", key, v)
	}
	return n, nil
}

func planFor(pod *corev1.Pod, name string) (plan, error) {
	var p plan
	if len(pod.Annotations) == 0 {
		return p, nil
	}
	if k, v, ok := annotation(pod, AnnotationExitCode, name); ok {
		n, err := parseExitCode(k, v)
		if err != nil {
			return p, err
		}
		p.exits, p.exitCode = true, n
	}
	if k, v, ok := annotation(pod, AnnotationExitAfter, name); ok {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil || d < 0 {
			return p, fmt.Errorf("annotation %s: %q is not a duration >= 0 (like 2s)", k, v)
		}
		p.exits, p.exitAfter = true, d
	}
	if _, v, ok := annotation(pod, AnnotationStartError, name); ok {
		p.startError = v
		if p.startError == "" {
			p.startError = "simulated start error"
		}
	}
	if k, v, ok := annotation(pod, AnnotationIgnoreSIGTERM, name); ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return p, fmt.Errorf("annotation %s: %q is not a boolean", k, v)
		}
		p.ignoreTerm = b
	}
	k, v, okCode := annotation(pod, AnnotationExecExitCode, name)
	_, out, okOut := annotation(pod, AnnotationExecStdout, name)
	if okCode || okOut {
		p.exec = &execSpec{stdout: []byte(out)}
		if ka, va, ok := annotation(pod, AnnotationExecAfter, name); ok {
			d, err := time.ParseDuration(strings.TrimSpace(va))
			if err != nil || d < 0 {
				return p, fmt.Errorf("annotation %s: %q is not a duration >= 0 (like 5s)", ka, va)
			}
			p.exec.after = d
		}
		if okCode {
			n, err := parseExitCode(k, v)
			if err != nil {
				return p, err
			}
			p.exec.exitCode = n
		}
	}
	return p, nil
}

// StartContainer implements runtime.Runtime.
func (r *Runtime) StartContainer(ctx context.Context, p *corev1.Pod, c *corev1.Container, attempt int, opts runtime.StartOptions) (runtime.ContainerStatus, error) {
	if p == nil || c == nil {
		return runtime.ContainerStatus{State: runtime.StateUnknown}, errors.New("sim: StartContainer needs a pod and a container")
	}
	st := runtime.ContainerStatus{PodUID: p.UID, Name: c.Name, Attempt: attempt, Hash: runtime.ContainerHash(c), Image: c.Image, ImageID: c.Image,
		Resources: runtime.StartResources(c)}
	pl, err := planFor(p, c.Name)
	if err != nil {
		st.State, st.Reason, st.Message = runtime.StateExited, ReasonConfigError, err.Error()
		return st, fmt.Errorf("sim: container %q: %w", c.Name, err)
	}
	if err := r.waitStart(ctx); err != nil {
		st.State, st.Reason, st.Message = runtime.StateUnknown, "", err.Error()
		return st, fmt.Errorf("sim: start of container %q: %w", c.Name, err)
	}

	now := time.Now()
	st.ID = r.prefix + strconv.FormatUint(r.seq.Add(1), 16)
	st.CreatedAt, st.StartedAt = now, now
	st.State = runtime.StateRunning
	ct := &container{exec: pl.exec, ignoreTerm: pl.ignoreTerm}
	var startErr error
	if pl.startError != "" {
		st.State, st.ExitCode, st.Reason, st.Message = runtime.StateExited, exitCodeCannotRun, ReasonCannotRun, pl.startError
		st.StartedAt, st.FinishedAt = time.Time{}, now
		startErr = fmt.Errorf("sim: container %q cannot run: %s", c.Name, pl.startError)
	}
	ct.status = st

	r.Mu.Lock()
	r.Table.Add(p.UID, p.Namespace, p.Name, ct)
	if startErr == nil && pl.exits {
		code := pl.exitCode
		ct.timer = time.AfterFunc(pl.exitAfter, func() { r.exit(ct, code) })
	}
	r.Mu.Unlock()
	return st, startErr
}

// waitStart holds a start slot for the start latency.
func (r *Runtime) waitStart(ctx context.Context) error {
	if r.starts != nil {
		r.waiting.Add(1)
		select {
		case r.starts <- struct{}{}:
			r.waiting.Add(-1)
			defer func() { <-r.starts }()
		case <-ctx.Done():
			r.waiting.Add(-1)
			return ctx.Err()
		}
	}
	if r.opts.startLatency > 0 {
		t := time.NewTimer(r.opts.startLatency)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return ctx.Err()
}

// exit ends a running container and announces it.
func (r *Runtime) exit(c *container, code int) {
	r.Mu.Lock()
	if c.status.State != runtime.StateRunning {
		r.Mu.Unlock()
		return
	}
	c.status.State = runtime.StateExited
	c.status.ExitCode = code
	c.status.FinishedAt = time.Now()
	if code == 0 {
		c.status.Reason = ReasonCompleted
	} else {
		c.status.Reason = ReasonError
	}
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if c.exited != nil {
		close(c.exited)
	}
	ev := runtime.Event{PodUID: c.status.PodUID, ContainerID: c.status.ID, State: runtime.StateExited}
	r.Mu.Unlock()
	r.Queue.Push(ev)
}

// exitedChan returns a channel closed when c exits. Called with r.Mu held.
func (c *container) exitedChan() <-chan struct{} {
	if c.exited == nil {
		c.exited = make(chan struct{})
		if c.status.State != runtime.StateRunning {
			close(c.exited)
		}
	}
	return c.exited
}

// StopContainer implements runtime.Runtime.
func (r *Runtime) StopContainer(ctx context.Context, id string, grace time.Duration) error {
	r.Mu.Lock()
	c, ok := r.Table.ByID(id)
	if !ok {
		r.Mu.Unlock()
		return fmt.Errorf("sim: stop %s: %w", id, runtime.ErrNotFound)
	}
	if c.status.State != runtime.StateRunning {
		r.Mu.Unlock()
		return nil
	}
	if !c.ignoreTerm {
		r.Mu.Unlock()
		r.exit(c, 0)
		return nil
	}
	exited := c.exitedChan()
	r.Mu.Unlock()
	if grace > 0 {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-exited:
			return nil
		case <-t.C:
		case <-ctx.Done():
		}
	}
	// The grace period is over (or the caller gave up): SIGKILL.
	r.exit(c, exitCodeKilled)
	return ctx.Err()
}

// RemovePod implements runtime.Runtime. It refuses while a container of the
// pod runs.
func (r *Runtime) RemovePod(_ context.Context, uid types.UID) error {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if c, busy := r.Table.Busy(uid, func(st *runtime.ContainerStatus) bool { return st.State == runtime.StateRunning }); busy {
		return fmt.Errorf("sim: remove pod %s: container %q (%s) still runs", uid, c.status.Name, c.status.ID)
	}
	r.Table.Remove(uid)
	return nil
}

// Restore implements runtime.Restorer: the instances are held as reported.
// The pod's annotations (when its spec is known) apply to the restored
// running instances as they would have at their start: a planned exit
// happens at its time counted from the instance's start (at once if that has
// passed), and exec and SIGTERM behave as planned.
func (r *Runtime) Restore(p *corev1.Pod, instances []runtime.ContainerStatus) error {
	if p == nil || p.UID == "" {
		return errors.New("sim: Restore needs a pod with a UID")
	}
	type exit struct {
		c    *container
		code int
	}
	var due []exit
	r.Mu.Lock()
	if r.Table.Pod(p.UID) != nil || len(instances) == 0 {
		r.Mu.Unlock()
		return nil
	}
	now := time.Now()
	for _, st := range instances {
		if _, known := r.Table.ByID(st.ID); st.ID == "" || st.Name == "" || known {
			continue
		}
		st.PodUID = p.UID
		if st.State != runtime.StateRunning && st.State != runtime.StateExited {
			// a container caught between create and start, or unknown:
			// taken as ended, so the pod worker decides what follows.
			st.State, st.Reason = runtime.StateExited, ReasonError
			if st.FinishedAt.IsZero() {
				st.FinishedAt = now
			}
		}
		ct := &container{status: st}
		if st.State == runtime.StateRunning {
			// a bad annotation failed no start back then (it would not run):
			// it plans nothing now.
			if pl, err := planFor(p, st.Name); err == nil {
				ct.exec, ct.ignoreTerm = pl.exec, pl.ignoreTerm
				if pl.exits {
					code := pl.exitCode
					if left := time.Until(st.StartedAt.Add(pl.exitAfter)); left > 0 {
						ct.timer = time.AfterFunc(left, func() { r.exit(ct, code) })
					} else {
						due = append(due, exit{ct, code})
					}
				}
			}
		}
		r.Table.Add(p.UID, p.Namespace, p.Name, ct)
	}
	r.Mu.Unlock()
	for _, d := range due {
		r.exit(d.c, d.code)
	}
	return nil
}

// Forget implements runtime.Restorer: the pod's instances are dropped as
// they are, with their planned exits (the next owner restores them).
func (r *Runtime) Forget(uid types.UID) {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	for _, c := range r.Table.Remove(uid) {
		if c.timer != nil {
			c.timer.Stop()
			c.timer = nil
		}
	}
}

// Logs implements runtime.Runtime with the synthetic lines.
func (r *Runtime) Logs(ctx context.Context, uid types.UID, name string, opts runtime.LogOptions, w io.Writer) error {
	r.Mu.Lock()
	c, err := r.Table.Find(uid, name, opts.Previous)
	if err != nil {
		r.Mu.Unlock()
		return err
	}
	st := c.status
	var exited <-chan struct{}
	if opts.Follow && st.State == runtime.StateRunning {
		exited = c.exitedChan()
	}
	r.Mu.Unlock()
	if !r.opts.syntheticLogs {
		if exited != nil {
			select {
			case <-exited:
			case <-ctx.Done():
			}
		}
		return nil
	}

	var recs []crilog.Record
	if !st.StartedAt.IsZero() {
		recs = append(recs, startRecord(st))
	}
	if st.State == runtime.StateExited {
		recs = append(recs, exitRecord(st))
	}
	o := crilog.NewOutput(w, opts, int64(len(recs)))
	for _, rec := range recs {
		if more, err := o.Add(rec); err != nil || !more {
			return err
		}
	}
	if exited == nil {
		return nil
	}
	select {
	case <-exited:
	case <-ctx.Done():
		return nil
	}
	r.Mu.Lock()
	st = c.status
	r.Mu.Unlock()
	_, err = o.Add(exitRecord(st))
	return err
}

func startRecord(st runtime.ContainerStatus) crilog.Record {
	return crilog.Record{Time: st.StartedAt, Stream: crilog.Stdout,
		Content: fmt.Appendf(nil, "sim: container %s started (attempt %d)", st.Name, st.Attempt)}
}

func exitRecord(st runtime.ContainerStatus) crilog.Record {
	return crilog.Record{Time: st.FinishedAt, Stream: crilog.Stdout,
		Content: fmt.Appendf(nil, "sim: container %s exited with code %d", st.Name, st.ExitCode)}
}

// Exec implements runtime.Runtime: it answers what the exec annotations
// say, without running anything.
func (r *Runtime) Exec(_ context.Context, uid types.UID, name string, cmd []string, _ io.Reader, _ time.Duration) (runtime.ExecResult, error) {
	if len(cmd) == 0 {
		return runtime.ExecResult{}, errors.New("sim: exec needs a command")
	}
	r.Mu.Lock()
	defer r.Mu.Unlock()
	c, err := r.Table.Find(uid, name, false)
	if err != nil {
		return runtime.ExecResult{}, err
	}
	if c.status.State != runtime.StateRunning {
		return runtime.ExecResult{}, fmt.Errorf("sim: container %q of pod %s is not running", name, uid)
	}
	if c.exec == nil || time.Since(c.status.StartedAt) < c.exec.after {
		return runtime.ExecResult{}, nil
	}
	return runtime.ExecResult{Stdout: append([]byte(nil), c.exec.stdout...), ExitCode: c.exec.exitCode}, nil
}

// Stats implements runtime.Runtime: running containers, with zero figures.
func (r *Runtime) Stats(uid types.UID) []runtime.ContainerStats {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	pd := r.Table.Pod(uid)
	if pd == nil {
		return nil
	}
	var out []runtime.ContainerStats
	for _, c := range pd.Instances {
		if c.status.State == runtime.StateRunning {
			out = append(out, runtime.ContainerStats{ContainerID: c.status.ID, Name: c.status.Name, StartedAt: c.status.StartedAt})
		}
	}
	return out
}

// PodProcessCount implements runtime.PodProcesses: one process for each
// running container (a simulated container stands for one).
func (r *Runtime) PodProcessCount(p *corev1.Pod) (uint64, bool) {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	var n uint64
	if pd := r.Table.Pod(p.UID); pd != nil {
		for _, c := range pd.Instances {
			if c.status.State == runtime.StateRunning {
				n++
			}
		}
	}
	return n, true
}
