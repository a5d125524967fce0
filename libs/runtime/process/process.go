package process

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/containerenv"
	"github.com/splitlet/splitlet/libs/runtime/crilog"
	"github.com/splitlet/splitlet/libs/runtime/internal/held"
)

// Type is the runtime's name; container IDs start with Type + "://".
const Type = "process"

// Version of the process runtime.
const Version = "0.1.0"

// Container exit and start-failure reasons (the kubelet's).
const (
	ReasonCompleted   = "Completed"
	ReasonError       = "Error"
	ReasonCannotRun   = "ContainerCannotRun"
	ReasonConfigError = "CreateContainerConfigError"
)

const (
	exitCodeCannotRun = 128
	maxMessageLines   = 80
	maxMessageBytes   = 2048
	defaultPath       = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// Option configures a Runtime.
type Option func(*options)

type options struct {
	root         string
	podIP        string
	hostIP       string
	baseEnv      []string
	log          *zap.Logger
	subreaper    bool
	drainTimeout time.Duration
	reapTimeout  time.Duration
	recordDir    string
	sweepEvery   time.Duration
	userRange    *UserRange
	userDir      string
	allowRoot    bool
}

// WithRootDir sets the directory under which pods/<uid>/<container>/ hold
// the containers' logs (default: <tmp>/splitlet-process). An empty value
// (here and for the IPs) keeps the default.
func WithRootDir(dir string) Option { return func(o *options) { o.root = or(dir, o.root) } }

// WithPodIP sets the IP every pod gets (default 127.0.0.1).
func WithPodIP(ip string) Option { return func(o *options) { o.podIP = or(ip, o.podIP) } }

// WithHostIP sets the node IP that status.hostIP resolves to (default
// 127.0.0.1).
func WithHostIP(ip string) Option { return func(o *options) { o.hostIP = or(ip, o.hostIP) } }

// or returns v, or def when v is empty: an empty option keeps the default.
func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// WithBaseEnv sets the environment every container starts from, as
// "KEY=value" (default: PATH only, the runtime's own or a standard one).
func WithBaseEnv(env []string) Option { return func(o *options) { o.baseEnv = env } }

// WithLogger sets the logger (default: none).
func WithLogger(l *zap.Logger) Option { return func(o *options) { o.log = l } }

// WithSubreaper makes the runtime's process a child subreaper (Linux
// prctl), so that orphans of a container's process group are reparented to
// it and reaped by it rather than by the system's init. It affects the whole
// process (default off).
func WithSubreaper(on bool) Option { return func(o *options) { o.subreaper = on } }

// WithDrainTimeout bounds how long the log copiers of an exited container
// may run on after its process group is dead, for output still held by a
// process that left the group (default 2 s).
func WithDrainTimeout(d time.Duration) Option { return func(o *options) { o.drainTimeout = d } }

// Runtime runs containers as local processes. It implements
// runtime.Runtime.
type Runtime struct {
	opts options
	log  *zap.Logger
	*held.Containers[*container]
	prefix string
	seq    atomic.Uint64
	// users claims pods' uids (nil: pods run as the runtime's user, or
	// as they ask).
	users *claims

	// group records (records.go)
	boot                 string
	ownerPID             int
	ownerStart           uint64
	stopSweep, sweepDone chan struct{}
	closeOnce            sync.Once
}

var (
	_ runtime.Runtime      = (*Runtime)(nil)
	_ runtime.ProcessLocal = (*Runtime)(nil)
	_ runtime.Restorer     = (*Runtime)(nil)
	_ runtime.PodLister    = (*Runtime)(nil)
	_ runtime.PodUsers     = (*Runtime)(nil)
)

// ProcessLocal implements runtime.ProcessLocal: the containers are the
// process's children (see the package documentation).
func (r *Runtime) ProcessLocal() {}

// container is one instance. status and cpu are guarded by Runtime.mu; pid
// and reaped by procMu.
type container struct {
	status runtime.ContainerStatus
	env    []string
	dir    string
	log    *crilog.File
	// fallbackToLogs: terminationMessagePolicy FallbackToLogsOnError.
	fallbackToLogs bool
	done           chan struct{} // closed once exited and the log is complete
	cpu            cpuSample
	user           *User // nil: the runtime's own
	// termMsg is the termination message file, relative to the pod's
	// directory ("": none).
	termMsg string

	procMu sync.Mutex
	pid    int
	reaped bool
}

// New builds a process runtime; it creates the root directory.
func New(opts ...Option) (*Runtime, error) {
	o := options{
		root:         filepath.Join(os.TempDir(), "splitlet-process"),
		podIP:        "127.0.0.1",
		hostIP:       "127.0.0.1",
		drainTimeout: 2 * time.Second,
		reapTimeout:  5 * time.Second,
		sweepEvery:   DefaultSweepInterval,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.baseEnv == nil {
		path := os.Getenv("PATH")
		if path == "" {
			path = defaultPath
		}
		o.baseEnv = []string{"PATH=" + path}
	}
	if o.log == nil {
		o.log = zap.NewNop()
	}
	root, err := filepath.Abs(o.root)
	if err != nil {
		return nil, fmt.Errorf("process runtime: root dir: %w", err)
	}
	o.root = root
	var users *claims
	if o.userRange != nil && os.Geteuid() == 0 {
		if users, err = newClaims(o.userDir, *o.userRange); err != nil {
			return nil, fmt.Errorf("process runtime: uid claims: %w", err)
		}
	}
	if err := makeRoot(root, users != nil); err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	if o.subreaper {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return nil, fmt.Errorf("process runtime: become a subreaper: %w", err)
		}
	}
	if o.recordDir != "" {
		if o.recordDir, err = openRecordDir(o.recordDir); err != nil {
			return nil, fmt.Errorf("process runtime: group records: %w", err)
		}
		if o.sweepEvery <= 0 {
			o.sweepEvery = DefaultSweepInterval
		}
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	r := &Runtime{
		opts:       o,
		log:        o.log,
		Containers: held.New(func(c *container) *runtime.ContainerStatus { return &c.status }, o.podIP),
		prefix:     Type + "://" + hex.EncodeToString(b[:]),
		boot:       bootID(),
		users:      users,
	}
	r.ownerPID, r.ownerStart = selfIdentity()
	if o.recordDir != "" {
		// what a dead predecessor left goes before anything starts.
		r.Sweep()
		r.stopSweep, r.sweepDone = make(chan struct{}), make(chan struct{})
		go r.sweepLoop()
	}
	return r, nil
}

// Type implements runtime.Runtime.
func (r *Runtime) Type() string { return Type }

// Version implements runtime.Runtime.
func (r *Runtime) Version() string { return Version }

// Close implements runtime.Runtime: it stops the event queue. Containers run
// on (they die with the process).
func (r *Runtime) Close() error {
	r.closeOnce.Do(func() {
		r.Queue.Close()
		if r.stopSweep != nil {
			close(r.stopSweep)
			<-r.sweepDone
		}
	})
	return nil
}

// RootDir is the directory the runtime keeps pods' files under.
func (r *Runtime) RootDir() string { return r.opts.root }

// safeName refuses a path element that would leave its directory.
func safeName(kind, s string) error {
	if s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\x00") {
		return fmt.Errorf("%s %q cannot name a directory", kind, s)
	}
	return nil
}

func (r *Runtime) podDir(uid types.UID) string {
	return filepath.Join(r.opts.root, "pods", string(uid))
}

// StartContainer implements runtime.Runtime.
func (r *Runtime) StartContainer(ctx context.Context, p *corev1.Pod, c *corev1.Container, attempt int, opts runtime.StartOptions) (runtime.ContainerStatus, error) {
	if p == nil || c == nil {
		return runtime.ContainerStatus{State: runtime.StateUnknown}, errors.New("process: StartContainer needs a pod and a container")
	}
	st := runtime.ContainerStatus{PodUID: p.UID, Name: c.Name, Attempt: attempt, Hash: runtime.ContainerHash(c), Image: c.Image, ImageID: c.Image,
		Resources: runtime.StartResources(c)}
	ct, err := r.createContainer(ctx, p, c, attempt, opts, &st)
	if err != nil {
		return st, err
	}
	cmd, err := containerCommand(c, ct)
	if err != nil {
		return r.failStart(p, ct, st, err)
	}
	outR, errR, err := startPiped(cmd)
	if err != nil {
		return r.failStart(p, ct, st, err)
	}
	ct.pid = cmd.Process.Pid
	r.record(ct.pid, string(p.UID), c.Name)
	st.State = runtime.StateRunning
	st.StartedAt = time.Now()
	ct.status = st
	r.store(p, ct)
	go r.watch(ct, cmd, outR, errR)
	r.log.Debug("container started", append(logging.Pod(p.Namespace, p.Name, string(p.UID)),
		zap.String("container", c.Name), zap.String("id", st.ID), zap.Int("pid", ct.pid), zap.Int("attempt", attempt))...)
	return st, nil
}

// createContainer checks the container, works out its environment and
// user, and makes its directory, mounts, termination message file and
// log: the instance, not yet running, with st given its ID and log path.
// On an error st is the exited instance's status (a configuration error,
// or cannot run) and the error is StartContainer's.
func (r *Runtime) createContainer(ctx context.Context, p *corev1.Pod, c *corev1.Container, attempt int, opts runtime.StartOptions, st *runtime.ContainerStatus) (*container, error) {
	fail := func(reason string, err error) (*container, error) {
		st.State, st.Reason, st.Message = runtime.StateExited, reason, err.Error()
		return nil, fmt.Errorf("process: container %q of pod %s: %w", c.Name, p.UID, err)
	}
	if err := safeName("pod UID", string(p.UID)); err != nil {
		return fail(ReasonConfigError, err)
	}
	if err := safeName("container name", c.Name); err != nil {
		return fail(ReasonConfigError, err)
	}
	if attempt < 0 {
		return fail(ReasonConfigError, fmt.Errorf("attempt %d < 0", attempt))
	}
	if err := ctx.Err(); err != nil {
		st.State = runtime.StateUnknown
		return nil, err
	}
	env, err := r.containerEnv(ctx, p, c, opts)
	if err != nil {
		return fail(ReasonConfigError, err)
	}
	user, err := r.userFor(p, c)
	if err != nil {
		return fail(ReasonConfigError, err)
	}
	files, err := r.podFiles(p, user)
	if err != nil {
		return fail(ReasonConfigError, err)
	}
	defer files.Close()
	if err := files.containerDir(c.Name); err != nil {
		return fail(ReasonCannotRun, err)
	}
	if err := files.linkMounts(c.Name, opts.Mounts); err != nil {
		return fail(ReasonConfigError, err)
	}
	termMsg, err := files.terminationFile(c)
	if err != nil {
		return fail(ReasonConfigError, err)
	}
	cdir := filepath.Join(r.podDir(p.UID), c.Name)
	st.ID = r.prefix + strconv.FormatUint(r.seq.Add(1), 16)
	st.CreatedAt = time.Now()
	st.LogPath = filepath.Join(cdir, strconv.Itoa(attempt)+".log")
	lf, err := files.createLog(c.Name + "/" + strconv.Itoa(attempt) + ".log")
	if err != nil {
		return fail(ReasonCannotRun, err)
	}
	ct := &container{env: env, log: lf, done: make(chan struct{}), user: user, termMsg: termMsg,
		fallbackToLogs: c.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError}
	// the container's own directory is its; when the way there is closed
	// to it, it starts in / (kubelet: the cwd of an image without a
	// WORKDIR).
	ct.dir = cdir
	if user != nil && !reachable(cdir, user) {
		ct.dir = "/"
	}
	return ct, nil
}

// containerCommand is the container's process: its program found on the
// container's PATH, in its working directory, as its user, in a process
// group of its own that dies with the runtime.
func containerCommand(c *corev1.Container, ct *container) (*exec.Cmd, error) {
	// kubelet: command replaces the entrypoint, args the cmd; with no
	// image, the first word of either is the program.
	argv := append(containerenv.Expand(c.Command, ct.env), containerenv.Expand(c.Args, ct.env)...)
	if len(argv) == 0 {
		return nil, errors.New("no command: the process runtime has no image entrypoint, so the container needs command or args")
	}
	if c.WorkingDir != "" {
		ct.dir = c.WorkingDir
		if fi, err := os.Stat(c.WorkingDir); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("working directory %q does not exist or is not a directory", c.WorkingDir)
		}
	}
	path, err := lookPath(argv[0], ct.env, ct.dir)
	if err != nil {
		return nil, err
	}
	return &exec.Cmd{
		Path: path,
		Args: argv,
		Env:  ct.env,
		Dir:  ct.dir,
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:    true,
			Pdeathsig:  syscall.SIGKILL,
			Credential: credential(ct.user),
		},
	}, nil
}

// startPiped starts cmd with its stdout and stderr on pipes and returns
// their read ends.
func startPiped(cmd *exec.Cmd) (outR, errR *os.File, err error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = start(cmd)
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, nil, err
	}
	return outR, errR, nil
}

// failStart records an instance that could not run.
func (r *Runtime) failStart(p *corev1.Pod, ct *container, st runtime.ContainerStatus, cause error) (runtime.ContainerStatus, error) {
	st.State, st.ExitCode, st.Reason, st.Message = runtime.StateExited, exitCodeCannotRun, ReasonCannotRun, cause.Error()
	st.FinishedAt = time.Now()
	ct.status = st
	ct.reaped = true
	_ = ct.log.Close()
	close(ct.done)
	r.store(p, ct)
	r.log.Info("container cannot run", append(logging.Pod(p.Namespace, p.Name, string(p.UID)),
		zap.String("container", st.Name), zap.Error(cause))...)
	return st, fmt.Errorf("process: container %q of pod %s cannot run: %w", st.Name, p.UID, cause)
}

// store adds an instance and forgets the exited instances of its name
// beyond the newest ones kept, with their logs.
func (r *Runtime) store(p *corev1.Pod, ct *container) {
	var drop []string
	r.Mu.Lock()
	for _, c := range r.Table.Add(ct.status.PodUID, p.Namespace, p.Name, ct) {
		if c.status.LogPath != ct.status.LogPath {
			drop = append(drop, c.status.LogPath)
		}
	}
	r.Mu.Unlock()
	for _, path := range drop {
		r.removeLog(ct.status.PodUID, path)
	}
}

// watch follows a container's process to its end: it copies the output to
// the log, kills what is left of the group once the leader exits, reaps,
// records the exit and announces it.
func (r *Runtime) watch(c *container, cmd *exec.Cmd, outR, errR *os.File) {
	var copiers sync.WaitGroup
	copiers.Add(2)
	go func() { defer copiers.Done(); _ = c.log.Copy(crilog.Stdout, outR) }()
	go func() { defer copiers.Done(); _ = c.log.Copy(crilog.Stderr, errR) }()

	// Wait for the leader to exit without reaping it, so that its pid, the
	// group's id, cannot be reused while the rest of the group is killed.
	waitExited(c.pid)
	finished := time.Now()
	c.procMu.Lock()
	// A container ends with its init process: kill the rest of the group.
	_ = syscall.Kill(-c.pid, syscall.SIGKILL)
	_ = cmd.Wait()
	c.reaped = true
	c.procMu.Unlock()
	code := exitCode(cmd.ProcessState)
	r.reapGroup(c.pid)
	r.unrecord(c.pid)

	drained := make(chan struct{})
	go func() { copiers.Wait(); close(drained) }()
	t := time.NewTimer(r.opts.drainTimeout)
	select {
	case <-drained:
	case <-t.C:
		// A process that left the group still holds the pipes.
		outR.Close()
		errR.Close()
		<-drained
	}
	t.Stop()
	outR.Close()
	errR.Close()
	_ = c.log.Close()
	// kubelet: the termination message file, else, with
	// FallbackToLogsOnError, the end of a failed container's log.
	message := r.terminationMessage(c)
	if message == "" && code != 0 && c.fallbackToLogs {
		message = r.lastLog(c)
	}

	r.Mu.Lock()
	c.status.Message = message
	c.status.State = runtime.StateExited
	c.status.ExitCode = code
	c.status.FinishedAt = finished
	if code == 0 {
		c.status.Reason = ReasonCompleted
	} else {
		c.status.Reason = ReasonError
	}
	ev := runtime.Event{PodUID: c.status.PodUID, ContainerID: c.status.ID, State: runtime.StateExited}
	st := c.status
	r.Mu.Unlock()
	close(c.done)
	r.Queue.Push(ev)
	r.log.Debug("container exited", zap.String(logging.FieldUID, string(st.PodUID)), zap.String("container", st.Name),
		zap.String("id", st.ID), zap.Int("exitCode", code))
}

// lastLog is the end of a failed container's log, its termination message
// under FallbackToLogsOnError (kubelet: the last 80 lines, at most 2 KiB).
func (r *Runtime) lastLog(c *container) string {
	f, err := r.openLog(c.status.PodUID, c.status.LogPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	var b bytes.Buffer
	_ = crilog.Read(context.Background(), f, runtime.LogOptions{TailLines: maxMessageLines}, nil, &b)
	msg := b.Bytes()
	if len(msg) > maxMessageBytes {
		msg = msg[len(msg)-maxMessageBytes:]
	}
	return string(msg)
}

// waitExited blocks until the process pid has exited, leaving it a zombie.
func waitExited(pid int) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// exitCode is the code a shell would report: 128 + the signal for a process
// killed by one.
func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// signal sends sig to the container's process group while its leader has
// not been reaped (so the group id is still the container's).
func (c *container) signal(sig syscall.Signal) {
	c.procMu.Lock()
	defer c.procMu.Unlock()
	if !c.reaped {
		_ = syscall.Kill(-c.pid, sig)
	}
}

// StopContainer implements runtime.Runtime.
func (r *Runtime) StopContainer(ctx context.Context, id string, grace time.Duration) error {
	r.Mu.Lock()
	c, ok := r.Table.ByID(id)
	r.Mu.Unlock()
	if !ok {
		return fmt.Errorf("process: stop %s: %w", id, runtime.ErrNotFound)
	}
	select {
	case <-c.done:
		return nil
	default:
	}
	c.signal(syscall.SIGTERM)
	if grace > 0 {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-c.done:
			return nil
		case <-t.C:
		case <-ctx.Done():
			c.signal(syscall.SIGKILL)
			return ctx.Err()
		}
	}
	c.signal(syscall.SIGKILL)
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RemovePod implements runtime.Runtime. It refuses while a container of the
// pod runs, and also removes the files of a pod it does not hold (left by
// an earlier run).
func (r *Runtime) RemovePod(_ context.Context, uid types.UID) error {
	if err := safeName("pod UID", string(uid)); err != nil {
		return fmt.Errorf("process: remove pod: %w", err)
	}
	r.Mu.Lock()
	if c, busy := r.Table.Busy(uid, func(st *runtime.ContainerStatus) bool { return st.State != runtime.StateExited }); busy {
		r.Mu.Unlock()
		return fmt.Errorf("process: remove pod %s: container %q (%s) still runs", uid, c.status.Name, c.status.ID)
	}
	r.Table.Remove(uid)
	r.Mu.Unlock()
	if err := os.RemoveAll(r.podDir(uid)); err != nil {
		return fmt.Errorf("process: remove pod %s: %w", uid, err)
	}
	return nil
}

// Logs implements runtime.Runtime.
func (r *Runtime) Logs(ctx context.Context, uid types.UID, name string, opts runtime.LogOptions, w io.Writer) error {
	r.Mu.Lock()
	c, err := r.Table.Find(uid, name, opts.Previous)
	if err != nil {
		r.Mu.Unlock()
		return err
	}
	path, live := c.status.LogPath, c.log
	r.Mu.Unlock()
	f, err := r.openLog(uid, path)
	if err != nil {
		return err
	}
	defer f.Close()
	return crilog.Read(ctx, f, opts, live, w)
}
