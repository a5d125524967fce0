package cri

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/splitlet/splitlet/libs/cgroups"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/gc"
	"github.com/splitlet/splitlet/libs/runtime/internal/eventq"
)

// Type is the runtime's name in Splitlet's configuration (--runtime=cri).
// Container IDs carry the CRI runtime's own name instead
// ("containerd://<id>").
const Type = "cri"

// DefaultEndpoint is containerd's CRI socket.
const DefaultEndpoint = "unix:///run/containerd/containerd.sock"

// DefaultLogRoot is where the kubelet keeps pod logs.
const DefaultLogRoot = "/var/log/pods"

// Start failure reasons (the kubelet's).
const (
	ReasonErrImagePull      = "ErrImagePull"
	ReasonImagePullBackOff  = "ImagePullBackOff"
	ReasonErrImageNeverPull = "ErrImageNeverPull"
	ReasonInvalidImageName  = "InvalidImageName"
	ReasonImageInspectError = "ImageInspectError"
	ReasonCreateConfigError = "CreateContainerConfigError"
	ReasonCreateError       = "CreateContainerError"
	ReasonContainerCreating = "ContainerCreating"
	ReasonRunContainerError = "RunContainerError"
	maxTerminationLogLines  = 80
	maxTerminationLogBytes  = 2048
)

// Option configures a Runtime.
type Option func(*options)

type options struct {
	endpoint string
	logRoot  string
	// containerLogDir holds a link to each started container's log.
	containerLogDir string
	hostIP          string
	log             *zap.Logger
	poll            time.Duration
	connTimeout     time.Duration
	imageBackOff    time.Duration
	imageBackOffMx  time.Duration
	// pullSlots is how many image pulls run at once (0: no limit).
	pullSlots int
	// pullRecordsDir keeps which credentials pulled each image ("": no
	// records, every present image runs for every pod).
	pullRecordsDir string
	// credProviders are the credential provider plugins (nil: none).
	credProviders *CredentialProviders
	security      security
	// cgroups lays out the pods' cgroups (nil: the sandboxes get the CRI
	// runtime's default parent).
	cgroups       *cgroups.Node
	node          string
	clusterDomain *string
	containerGC   gc.ContainerPolicy
}

// WithNode names the node the runtime runs pods for: its sandboxes and
// containers carry the name, and it sees only those that do (default: no
// name, every pod of the runtime).
func WithNode(name string) Option { return func(o *options) { o.node = name } }

// nodeLabels adds the node's label to labels (with a node name).
func (r *Runtime) nodeLabels(labels map[string]string) map[string]string {
	if r.opts.node != "" {
		labels[NodeLabel] = r.opts.node
	}
	return labels
}

// WithEndpoint sets the CRI endpoint (default DefaultEndpoint; an empty
// value keeps it, as for the other string options).
func WithEndpoint(e string) Option { return func(o *options) { o.endpoint = or(e, o.endpoint) } }

// WithLogRoot sets the directory of the pods' log directories (default
// DefaultLogRoot).
func WithLogRoot(dir string) Option { return func(o *options) { o.logRoot = or(dir, o.logRoot) } }

// WithHostIP sets the host's IP: a hostNetwork pod's IP (default
// 127.0.0.1).
func WithHostIP(ip string) Option { return func(o *options) { o.hostIP = or(ip, o.hostIP) } }

// WithLogger sets the logger (default: none).
func WithLogger(l *zap.Logger) Option { return func(o *options) { o.log = l } }

// WithPollInterval sets the relist period (default 1 s, the kubelet's PLEG).
func WithPollInterval(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.poll = d
		}
	}
}

// WithImageBackOff sets the image pull back-off (default 10 s doubling to
// 5 min, the kubelet's).
func WithImageBackOff(base, max time.Duration) Option {
	return func(o *options) {
		if base > 0 && max >= base {
			o.imageBackOff, o.imageBackOffMx = base, max
		}
	}
}

// WithImagePulls sets how many image pulls run at once, as the kubelet's
// serializeImagePulls and maxParallelImagePulls do: serial, one at a time
// (the kubelet's default); otherwise maxParallel at once, no limit when it
// is 0 or less.
func WithImagePulls(serial bool, maxParallel int) Option {
	return func(o *options) {
		switch {
		case serial:
			o.pullSlots = 1
		case maxParallel > 0:
			o.pullSlots = maxParallel
		default:
			o.pullSlots = 0
		}
	}
}

// WithPullRecordsDir keeps, in dir, which credentials pulled each image,
// so that an image pulled with a pod's pull secret runs for another pod
// only with the same credentials or after a pull of its own (the
// kubelet's ensure-secret-pulled-images, with its <root-dir>/image_manager
// records). Default: no records.
func WithPullRecordsDir(dir string) Option { return func(o *options) { o.pullRecordsDir = dir } }

// WithCredentialProviders sets the credential provider plugins asked for
// the credentials of an image (LoadCredentialProviders; default none).
func WithCredentialProviders(cp *CredentialProviders) Option {
	return func(o *options) { o.credProviders = cp }
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// Runtime runs pods as CRI sandboxes and containers. It implements
// runtime.Runtime.
type Runtime struct {
	opts    options
	log     *zap.Logger
	rs      criapi.RuntimeService
	is      criapi.ImageManagerService
	name    string
	version string
	events  *eventq.Queue

	imageBackOff *flowcontrol.Backoff
	pullMu       sync.Mutex
	pullErrs     map[string]string
	// pullSlots holds a token per pull under way (nil: no limit).
	pullSlots chan struct{}
	// records is nil without WithPullRecordsDir.
	records *pullRecords
	// imageVols reaches containerd's snapshots service for image volumes.
	imageVols imageVolumes

	mu   sync.Mutex
	pods map[types.UID]*pod
	byID map[string]*instance
	// resized holds what containers were resized to since this runtime
	// started (their annotation says what they started with).
	resized map[string]corev1.ResourceRequirements
	// sandboxIPs caches each sandbox's IP (it does not change).
	sandboxIPs map[string]string
	cpu        map[string]cpuSample

	// relistMu serialises relists (the loop's and Relist's).
	relistMu sync.Mutex

	// orphanCgroups are the pod cgroups the last ReconcileCgroups found
	// without a sandbox (removed when the next one finds them so again).
	orphanMu      sync.Mutex
	orphanCgroups map[types.UID]bool

	stop chan struct{}
	done chan struct{}
}

var (
	_ runtime.Runtime   = (*Runtime)(nil)
	_ runtime.PodLister = (*Runtime)(nil)
	_ runtime.Relister  = (*Runtime)(nil)
)

// pod is what the runtime knows of one pod. The fields are guarded by
// Runtime.mu; sandboxMu serialises the creation of the pod's sandbox.
type pod struct {
	sandboxMu sync.Mutex
	// sandboxID is the pod's ready sandbox ("" when it has none);
	// sandboxAt when StartContainer set it (a relist begun earlier leaves
	// it); hasSandbox says whether any sandbox of the pod was seen, and
	// sandboxAttempt the highest attempt of them.
	sandboxID      string
	sandboxAt      time.Time
	hasSandbox     bool
	sandboxAttempt uint32
	// busy counts StartContainer calls under way for the pod.
	busy      int
	instances map[string]*instance
	// namespace and name, from the pod or its sandbox's and containers'
	// labels.
	namespace, name string
	// spec is the pod as the last StartContainer or resize had it (nil
	// until then): what a resize of one container changes the pod's
	// cgroup from.
	spec *corev1.Pod
}

// instance is one container of a pod, as last read from the runtime.
type instance struct {
	id     string // the CRI runtime's ID
	status runtime.ContainerStatus
	// seen is when the relist that found (or the call that made) the
	// instance started: a relist that began earlier cannot drop it.
	seen time.Time
	// failedStart: StartContainer failed for it, which StartContainer
	// reports; its exit is not announced.
	failedStart bool
}

// New connects to the CRI runtime, reads what it runs, and starts the
// relist loop.
func New(ctx context.Context, opts ...Option) (*Runtime, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	dialCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rs, is, v, err := connect(ctx, dialCtx, &o)
	if err != nil {
		return nil, err
	}
	o.security.appArmor = kube.AppArmorHost()
	r := &Runtime{
		opts:         o,
		log:          o.log,
		rs:           rs,
		is:           is,
		name:         v.RuntimeName,
		version:      v.RuntimeVersion,
		events:       eventq.New(),
		imageBackOff: flowcontrol.NewBackOff(o.imageBackOff, o.imageBackOffMx),
		pullErrs:     map[string]string{},
		pullSlots:    pullSlots(o.pullSlots),
		pods:         map[types.UID]*pod{},
		byID:         map[string]*instance{},
		resized:      map[string]corev1.ResourceRequirements{},
		sandboxIPs:   map[string]string{},
		cpu:          map[string]cpuSample{},
		stop:         make(chan struct{}),
		done:         make(chan struct{}),
	}
	if err := r.relist(dialCtx); err != nil {
		_ = r.closeConns()
		r.events.Close()
		return nil, fmt.Errorf("cri runtime: read the pods of %s: %w", o.endpoint, err)
	}
	if o.pullRecordsDir != "" {
		r.records = &pullRecords{dir: o.pullRecordsDir}
	}
	if o.cgroups != nil {
		// kubelet: the QoS cgroups are made at start; a host whose cgroups
		// cannot be written stops it.
		if err := r.ensureQoS(dialCtx, nil); err != nil {
			_ = r.closeConns()
			r.events.Close()
			return nil, fmt.Errorf("cri runtime: the QoS cgroups (keys cgroups-per-qos, cgroup-root): %w", err)
		}
	}
	go r.loop()
	r.log.Info("cri runtime connected", zap.String("endpoint", o.endpoint), zap.String("runtime", r.name),
		zap.String("version", r.version), zap.Int("containers", len(r.byID)))
	return r, nil
}

// newOptions is the defaults with opts applied, the directories made
// absolute.
func newOptions(opts []Option) (options, error) {
	o := options{
		endpoint:        DefaultEndpoint,
		logRoot:         DefaultLogRoot,
		containerLogDir: DefaultContainerLogDir,
		hostIP:          "127.0.0.1",
		poll:            time.Second,
		connTimeout:     2 * time.Minute,
		imageBackOff:    10 * time.Second,
		imageBackOffMx:  300 * time.Second,
		pullSlots:       1,
		security:        security{seccompRoot: DefaultSeccompProfileRoot},
		containerGC:     DefaultContainerPolicy,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		o.log = zap.NewNop()
	}
	var err error
	if o.logRoot, err = filepath.Abs(o.logRoot); err != nil {
		return o, fmt.Errorf("cri runtime: log root: %w", err)
	}
	if o.containerLogDir, err = filepath.Abs(o.containerLogDir); err != nil {
		return o, fmt.Errorf("cri runtime: container log directory: %w", err)
	}
	if o.security.seccompRoot, err = filepath.Abs(o.security.seccompRoot); err != nil {
		return o, fmt.Errorf("cri runtime: seccomp profile root: %w", err)
	}
	return o, nil
}

// connect dials the runtime and image services at o.endpoint (within
// dialCtx), reads the runtime's version and the security features its
// status reports into o; on an error nothing stays open.
func connect(ctx, dialCtx context.Context, o *options) (criapi.RuntimeService, criapi.ImageManagerService, *runtimeapi.VersionResponse, error) {
	rs, err := remote.NewRemoteRuntimeService(dialCtx, o.endpoint, o.connTimeout, nil, false)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("cri runtime: connect to %s: %w", o.endpoint, err)
	}
	is, err := remote.NewRemoteImageService(dialCtx, o.endpoint, o.connTimeout, nil, false)
	if err != nil {
		_ = rs.Close(ctx)
		return nil, nil, nil, fmt.Errorf("cri runtime: connect to the image service at %s: %w", o.endpoint, err)
	}
	v, err := rs.Version(dialCtx, "")
	if err != nil {
		_ = rs.Close(ctx)
		_ = is.Close(ctx)
		return nil, nil, nil, fmt.Errorf("cri runtime: version of %s: %w", o.endpoint, err)
	}
	if err := o.security.readFeatures(dialCtx, rs.Status); err != nil {
		_ = rs.Close(ctx)
		_ = is.Close(ctx)
		return nil, nil, nil, fmt.Errorf("cri runtime: status of %s: %w", o.endpoint, err)
	}
	return rs, is, v, nil
}

func pullSlots(n int) chan struct{} {
	if n <= 0 {
		return nil
	}
	return make(chan struct{}, n)
}

// Type implements runtime.Runtime.
func (r *Runtime) Type() string { return Type }

// Version implements runtime.Runtime: the CRI runtime's name and version.
func (r *Runtime) Version() string { return r.name + " " + r.version }

// RuntimeName is the CRI runtime's name, the scheme of container IDs.
func (r *Runtime) RuntimeName() string { return r.name }

// RuntimeVersion is the version the CRI runtime reports (Version).
func (r *Runtime) RuntimeVersion() string { return r.version }

// Events implements runtime.Runtime.
func (r *Runtime) Events() <-chan runtime.Event { return r.events.C() }

// Close implements runtime.Runtime: it stops the relist loop and the event
// queue and closes the connections. Sandboxes and containers run on.
func (r *Runtime) Close() error {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
	r.events.Close()
	r.closeImageVolumes()
	return r.closeConns()
}

func (r *Runtime) closeConns() error {
	ctx := context.Background()
	return errors.Join(r.rs.Close(ctx), r.is.Close(ctx))
}

// PodIP implements runtime.Runtime.
func (r *Runtime) PodIP(p *corev1.Pod) string {
	if p == nil || p.Spec.HostNetwork {
		return r.opts.hostIP
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	pd := r.pods[p.UID]
	if pd == nil || pd.sandboxID == "" {
		// kubelet: no sandbox, no pod IP (a pod whose volumes are not
		// ready yet shows none, not the node's).
		return ""
	}
	if ip := r.sandboxIPs[pd.sandboxID]; ip != "" {
		return ip
	}
	return r.opts.hostIP
}

// containerID is the ID the pod workers see.
func (r *Runtime) containerID(id string) string { return r.name + "://" + id }

// rawID strips the runtime's scheme from an ID.
func (r *Runtime) rawID(id string) string {
	if _, rest, ok := strings.Cut(id, "://"); ok {
		return rest
	}
	return id
}

func isNotFound(err error) bool { return status.Code(err) == codes.NotFound }

// grpcMessage is the message of a gRPC error, without the code.
func grpcMessage(err error) string {
	if s, ok := status.FromError(err); ok {
		return s.Message()
	}
	return err.Error()
}

func (r *Runtime) podLocked(uid types.UID) *pod {
	pd := r.pods[uid]
	if pd == nil {
		pd = &pod{instances: map[string]*instance{}}
		r.pods[uid] = pd
	}
	return pd
}

// StartContainer implements runtime.Runtime.
func (r *Runtime) StartContainer(ctx context.Context, p *corev1.Pod, c *corev1.Container, attempt int, opts runtime.StartOptions) (runtime.ContainerStatus, error) {
	if p == nil || c == nil {
		return runtime.ContainerStatus{State: runtime.StateUnknown}, errors.New("cri: StartContainer needs a pod and a container")
	}
	st := runtime.ContainerStatus{PodUID: p.UID, Name: c.Name, Attempt: attempt, Hash: runtime.ContainerHash(c), Image: c.Image,
		Resources: runtime.StartResources(c)}
	if attempt < 0 {
		err := fmt.Errorf("attempt %d < 0", attempt)
		return r.cannotStart(p, c, st, ReasonCreateConfigError, err.Error(), err)
	}
	if err := ctx.Err(); err != nil {
		st.State = runtime.StateUnknown
		return st, err
	}
	pd := r.beginPodWork(p)
	defer r.endPodWork(pd)
	return r.createAndStart(ctx, p, pd, c, attempt, opts, st)
}

// cannotStart reports a container that could not be made: st exited with
// reason and message, logged, and the error the caller returns.
func (r *Runtime) cannotStart(p *corev1.Pod, c *corev1.Container, st runtime.ContainerStatus, reason, message string, err error) (runtime.ContainerStatus, error) {
	st.State, st.Reason, st.Message = runtime.StateExited, reason, message
	r.log.Info("container cannot start", append(logging.Pod(p.Namespace, p.Name, string(p.UID)),
		zap.String("container", c.Name), zap.String("reason", reason), zap.String("message", message))...)
	return st, fmt.Errorf("cri: container %q of pod %s: %s: %w", c.Name, p.UID, reason, err)
}

// beginPodWork marks the pod busy while one of its containers starts (so it
// is neither forgotten nor its cgroup removed) and notes its name and spec.
func (r *Runtime) beginPodWork(p *corev1.Pod) *pod {
	r.mu.Lock()
	defer r.mu.Unlock()
	pd := r.podLocked(p.UID)
	pd.busy++
	pd.namespace, pd.name = p.Namespace, p.Name
	if r.opts.cgroups != nil {
		pd.spec = p.DeepCopy()
	}
	return pd
}

// endPodWork undoes beginPodWork's busy mark.
func (r *Runtime) endPodWork(pd *pod) {
	r.mu.Lock()
	pd.busy--
	r.mu.Unlock()
}

// createAndStart makes one container instance in the pod's sandbox and
// starts it; st is the status so far, filled in as the steps go.
func (r *Runtime) createAndStart(ctx context.Context, p *corev1.Pod, pd *pod, c *corev1.Container, attempt int, opts runtime.StartOptions, st runtime.ContainerStatus) (runtime.ContainerStatus, error) {
	// kubelet: the sandbox comes first (SyncPod), then each container's
	// image, config, create and start (startContainer).
	sb, err := r.ensureSandbox(ctx, p, pd, opts)
	if err != nil {
		if ctx.Err() != nil {
			st.State = runtime.StateUnknown
			return st, ctx.Err()
		}
		return r.cannotStart(p, c, st, ReasonContainerCreating, runtime.SandboxFailed+grpcMessage(err), err)
	}
	if got, ok := r.settleCreated(ctx, p.UID, c.Name); ok {
		// the start that was cut short went through after all.
		return got, nil
	}
	// kubelet: the pod's image volumes are pulled before the containers'
	// images (SyncPod), and fail only the containers that mount them.
	if reason, msg, err := r.prepareImageVolumes(ctx, p, sb, &opts); err != nil {
		if ctx.Err() != nil {
			st.State = runtime.StateUnknown
			return st, ctx.Err()
		}
		return r.cannotStart(p, c, st, reason, msg, err)
	}
	imageRef, reason, msg, err := r.ensureImage(ctx, p, c.Image, PullPolicy(c), sb.config, opts.PullSecrets, opts.ImageEvent)
	if err != nil {
		if ctx.Err() != nil {
			st.State = runtime.StateUnknown
			return st, ctx.Err()
		}
		return r.cannotStart(p, c, st, reason, msg, err)
	}
	cfg, err := r.prepareContainer(ctx, p, c, attempt, imageRef, sb, opts)
	if err != nil {
		return r.cannotStart(p, c, st, ReasonCreateConfigError, err.Error(), err)
	}
	begun := time.Now()
	id, err := r.rs.CreateContainer(ctx, sb.id, cfg, sb.config)
	if err != nil {
		return r.cannotStart(p, c, st, ReasonCreateError, grpcMessage(err), err)
	}
	st.ID = r.containerID(id)
	st.CreatedAt = begun
	st.LogPath = filepath.Join(sb.config.LogDirectory, cfg.LogPath)
	created := st
	created.State = runtime.StateCreated
	r.apply(id, created, begun)
	if err := r.rs.StartContainer(ctx, id); err != nil {
		return r.cannotRun(ctx, p, c, id, created, begun, err)
	}
	return r.started(ctx, p, c, attempt, id, created, begun), nil
}

// prepareContainer checks a runAsNonRoot container against its image's user,
// then builds its CRI config and log directory; any error is a CreateConfigError.
func (r *Runtime) prepareContainer(ctx context.Context, p *corev1.Pod, c *corev1.Container, attempt int, imageRef string, sb *sandbox, opts runtime.StartOptions) (*runtimeapi.ContainerConfig, error) {
	if runsAsNonRoot(p, c) {
		var uid *int64
		var user string
		if st, err := r.is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: imageRef}, false); err == nil && st.GetImage() != nil {
			if u := st.GetImage().GetUid(); u != nil {
				v := u.GetValue()
				uid = &v
			}
			user = st.GetImage().GetUsername()
		}
		if err := verifyNonRoot(p, c, uid, user); err != nil {
			return nil, err
		}
	}
	cfg, err := r.containerConfig(ctx, p, c, attempt, imageRef, sb.ip, opts)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(sb.config.LogDirectory, c.Name), 0o755); err != nil {
		return nil, err
	}
	return cfg, nil
}

// cannotRun reports a created container whose start failed: it exists and
// tells why it did not run (containerd: StartError, exit code 128); it is an
// instance like any other, whose failure this call reports (no event).
func (r *Runtime) cannotRun(ctx context.Context, p *corev1.Pod, c *corev1.Container, id string, created runtime.ContainerStatus, begun time.Time, err error) (runtime.ContainerStatus, error) {
	r.mu.Lock()
	if in := r.byID[id]; in != nil {
		in.failedStart = true
	}
	r.mu.Unlock()
	// The caller's context may be what cut the start short; the
	// status is read back all the same.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	got, serr := r.refresh(rctx, id, begun)
	cancel()
	if serr != nil {
		got = created
		got.State, got.Reason, got.Message = runtime.StateExited, ReasonRunContainerError, grpcMessage(err)
	}
	r.log.Info("container cannot run", append(logging.Pod(p.Namespace, p.Name, string(p.UID)),
		zap.String("container", c.Name), zap.String("id", got.ID), zap.Error(err))...)
	return got, fmt.Errorf("cri: start container %q of pod %s: %w", c.Name, p.UID, err)
}

// started records a container that ran: running first, so that an exit
// already over by the time its status is read is announced like any other;
// then links its log and prunes the container's older instances.
func (r *Runtime) started(ctx context.Context, p *corev1.Pod, c *corev1.Container, attempt int, id string, created runtime.ContainerStatus, begun time.Time) runtime.ContainerStatus {
	running := created
	running.State, running.StartedAt = runtime.StateRunning, time.Now()
	r.apply(id, running, begun)
	got, err := r.refresh(ctx, id, begun)
	if err != nil {
		got = running
	}
	r.linkLog(p.Namespace, p.Name, c.Name, id, created.LogPath)
	r.log.Debug("container started", append(logging.Pod(p.Namespace, p.Name, string(p.UID)),
		zap.String("container", c.Name), zap.String("id", got.ID), zap.Int("attempt", attempt))...)
	r.prune(ctx, p.UID, c.Name)
	return got
}

// settleCreated deals with the instances of a container that the cache
// holds as Created, left by a start that was cut short: each is read back
// from the runtime; one that runs after all is returned (ok) and no new
// instance is made; one still Created is removed, so that it holds no
// shim or log (kubelet: container GC removes created containers that are
// not running).
func (r *Runtime) settleCreated(ctx context.Context, uid types.UID, name string) (runtime.ContainerStatus, bool) {
	r.mu.Lock()
	var ids []string
	if pd := r.pods[uid]; pd != nil {
		for id, in := range pd.instances {
			if in.status.Name == name && in.status.State == runtime.StateCreated {
				ids = append(ids, id)
			}
		}
	}
	r.mu.Unlock()
	for _, id := range ids {
		st, err := r.refresh(ctx, id, time.Now())
		switch {
		case err != nil && isNotFound(err):
			r.gone(uid, id)
			continue
		case err != nil:
			r.log.Debug("cannot read a created container back", zap.String("id", id), zap.Error(err))
			continue
		case st.State == runtime.StateRunning:
			return st, true
		case st.State != runtime.StateCreated:
			continue
		}
		if err := r.rs.RemoveContainer(ctx, id); err != nil && !isNotFound(err) {
			r.log.Debug("cannot remove a created container", zap.String("id", id), zap.Error(err))
			continue
		}
		r.forget(uid, id)
	}
	return runtime.ContainerStatus{}, false
}

// refresh reads one container's status from the runtime into the cache.
func (r *Runtime) refresh(ctx context.Context, id string, seen time.Time) (runtime.ContainerStatus, error) {
	resp, err := r.rs.ContainerStatus(ctx, id, false)
	if err != nil {
		return runtime.ContainerStatus{}, err
	}
	if resp.GetStatus() == nil {
		return runtime.ContainerStatus{}, remote.ErrContainerStatusNil
	}
	st, ok := r.convert(ctx, resp.GetStatus())
	if !ok {
		return runtime.ContainerStatus{}, fmt.Errorf("cri: container %s has no pod labels", id)
	}
	return r.apply(id, st, seen), nil
}

// prune removes the dead instances of a container the policy lets go, with
// their logs, once a new instance started (kubelet: container GC, which
// keeps the newest dead instances per container).
func (r *Runtime) prune(ctx context.Context, uid types.UID, name string) {
	r.mu.Lock()
	pd := r.pods[uid]
	if pd == nil {
		r.mu.Unlock()
		return
	}
	drop := evictable(instancesByName(pd)[name], r.opts.containerGC, false, time.Now())
	r.mu.Unlock()
	if err := r.removeInstances(ctx, uid, drop); err != nil {
		r.log.Debug("cannot remove an old container", zap.String("uid", string(uid)), zap.String("container", name), zap.Error(err))
	}
}

func (r *Runtime) forget(uid types.UID, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.byID, id)
	delete(r.cpu, id)
	delete(r.resized, id)
	if pd := r.pods[uid]; pd != nil {
		delete(pd.instances, id)
	}
}

func sortInstances(list []*instance) {
	sort.SliceStable(list, func(i, j int) bool {
		a, b := list[i].status, list[j].status
		if !a.CreatedAt.Equal(b.CreatedAt) {
			return a.CreatedAt.Before(b.CreatedAt)
		}
		if a.Attempt != b.Attempt {
			return a.Attempt < b.Attempt
		}
		return a.ID < b.ID
	})
}

// StopContainer implements runtime.Runtime: CRI StopContainer with the
// grace as its timeout (whole seconds, rounded up), then the status is
// read back.
func (r *Runtime) StopContainer(ctx context.Context, id string, grace time.Duration) error {
	raw := r.rawID(id)
	r.mu.Lock()
	in := r.byID[raw]
	r.mu.Unlock()
	if in == nil {
		return fmt.Errorf("cri: stop %s: %w", id, runtime.ErrNotFound)
	}
	timeout := int64(0)
	if grace > 0 {
		timeout = int64((grace + time.Second - 1) / time.Second)
	}
	if err := r.rs.StopContainer(ctx, raw, timeout); err != nil {
		if isNotFound(err) {
			r.gone(in.status.PodUID, raw)
			return fmt.Errorf("cri: stop %s: %w", id, runtime.ErrNotFound)
		}
		return fmt.Errorf("cri: stop %s: %w", id, err)
	}
	if _, err := r.refresh(ctx, raw, time.Now()); err != nil {
		if isNotFound(err) {
			r.gone(in.status.PodUID, raw)
			return nil
		}
		return fmt.Errorf("cri: status of %s after stop: %w", id, err)
	}
	return nil
}

// gone drops an instance the runtime no longer has, announcing it if it
// was running.
func (r *Runtime) gone(uid types.UID, id string) {
	r.mu.Lock()
	in := r.byID[id]
	r.mu.Unlock()
	if in == nil {
		return
	}
	r.forget(uid, id)
	if in.status.State == runtime.StateRunning {
		r.events.Push(runtime.Event{PodUID: uid, ContainerID: in.status.ID, State: runtime.StateExited})
	}
}

// Pods implements runtime.PodLister: every pod with a sandbox or a
// container in the runtime, whoever made them (kubelet: the runtime's pods,
// from the sandboxes' and containers' labels), by UID.
func (r *Runtime) Pods() []runtime.PodRef {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]runtime.PodRef, 0, len(r.pods))
	for uid, pd := range r.pods {
		if len(pd.instances) == 0 && !pd.hasSandbox {
			continue // a first start under way
		}
		out = append(out, runtime.PodRef{UID: uid, Namespace: pd.namespace, Name: pd.name})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UID < out[j].UID })
	return out
}

// Relist implements runtime.Relister: it reads the runtime's sandboxes and
// containers now, as the relist loop does every poll interval.
func (r *Runtime) Relist(ctx context.Context) error { return r.relist(ctx) }

// PodContainers implements runtime.Runtime: the cached instances, oldest
// first.
func (r *Runtime) PodContainers(uid types.UID) []runtime.ContainerStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	pd := r.pods[uid]
	if pd == nil || len(pd.instances) == 0 {
		return nil
	}
	list := make([]*instance, 0, len(pd.instances))
	for _, in := range pd.instances {
		list = append(list, in)
	}
	sortInstances(list)
	out := make([]runtime.ContainerStatus, len(list))
	for i, in := range list {
		out[i] = in.status
	}
	return out
}

// runningID is the ID of the running instance of the pod's named
// container, "" when none runs.
func (r *Runtime) runningID(uid types.UID, name string) string {
	for _, c := range r.PodContainers(uid) {
		if c.Name == name && c.State == runtime.StateRunning {
			return c.ID
		}
	}
	return ""
}

// RemovePod implements runtime.Runtime: it refuses while a container of the
// pod runs; otherwise it stops and removes the pod's sandboxes (and with
// them their containers), removes any container left, and deletes the
// pod's log directory and its containers' log links.
func (r *Runtime) RemovePod(ctx context.Context, uid types.UID) error {
	if uid == "" || strings.ContainsAny(string(uid), "/\x00") {
		return fmt.Errorf("cri: remove pod: UID %q cannot name a pod", uid)
	}
	for _, c := range r.PodContainers(uid) {
		if c.State == runtime.StateRunning {
			return fmt.Errorf("cri: remove pod %s: container %q (%s) still runs", uid, c.Name, c.ID)
		}
	}
	// the cache's instances are read before the sandboxes go: their
	// removal deletes the containers, whose events may drop the instances
	// from the cache before the log links are removed.
	cached := r.containerNames(uid, nil)
	sel := r.nodeLabels(map[string]string{labelPodUID: string(uid)})
	sbs, err := r.rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: sel})
	if err != nil {
		return fmt.Errorf("cri: remove pod %s: %w", uid, err)
	}
	errs := r.removeSandboxes(ctx, sbs)
	cs, err := r.rs.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: sel})
	if err != nil {
		errs = append(errs, err)
	}
	ref := r.removedPodRef(uid, sbs, cs)
	for _, c := range cs {
		if err := r.rs.RemoveContainer(ctx, c.Id); err != nil && !isNotFound(err) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("cri: remove pod %s: %w", uid, errors.Join(errs...))
	}
	// kubelet: the pod's cgroup goes once its sandboxes are gone.
	r.removePodCgroup(uid)
	if err := r.removePodLogs(ref, append(cached, listedNames(cs)...)); err != nil {
		errs = append(errs, err)
	}
	if err := r.ReleaseImageVolumes(ctx, uid); err != nil {
		return fmt.Errorf("cri: remove pod %s: %w", uid, err)
	}
	r.dropPod(uid)
	if len(errs) > 0 {
		return fmt.Errorf("cri: remove pod %s: %w", uid, errors.Join(errs...))
	}
	return nil
}

// removeSandboxes stops and removes the sandboxes given.
func (r *Runtime) removeSandboxes(ctx context.Context, sbs []*runtimeapi.PodSandbox) []error {
	var errs []error
	for _, sb := range sbs {
		if err := r.rs.StopPodSandbox(ctx, sb.Id); err != nil && !isNotFound(err) {
			errs = append(errs, err)
			continue
		}
		if err := r.rs.RemovePodSandbox(ctx, sb.Id); err != nil && !isNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errs
}

// removedPodRef names the pod being removed: its namespace and name from
// its sandboxes' metadata, else its containers' labels, else the cache (a
// start or relist of this runtime); both "" when none of them knows it.
func (r *Runtime) removedPodRef(uid types.UID, sbs []*runtimeapi.PodSandbox, cs []*runtimeapi.Container) runtime.PodRef {
	ref := runtime.PodRef{UID: uid}
	for _, sb := range sbs {
		if md := sb.GetMetadata(); md.GetNamespace() != "" && md.GetName() != "" {
			ref.Namespace, ref.Name = md.GetNamespace(), md.GetName()
			return ref
		}
	}
	for _, c := range cs {
		if ns, name := c.GetLabels()[labelPodNamespace], c.GetLabels()[labelPodName]; ns != "" && name != "" {
			ref.Namespace, ref.Name = ns, name
			return ref
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if pd := r.pods[uid]; pd != nil {
		ref.Namespace, ref.Name = pd.namespace, pd.name
	}
	return ref
}

// removePodLogs deletes the removed pod's log directory and its
// containers' log links. With the pod's namespace and name known the
// directory is one path (<namespace>_<name>_<uid>, as the sandbox was
// made) and the links are those of names (the containers the cache and
// the runtime held).
// Only when nothing names the pod (no sandbox or container of it left in
// the runtime and none seen by this runtime: a removal begun by an earlier
// process, or sandboxes removed by another hand) is the log root read for
// every directory of the UID and the link directory for links into them.
func (r *Runtime) removePodLogs(ref runtime.PodRef, names []containerName) error {
	var dirs []string
	if ref.Namespace != "" && ref.Name != "" {
		dirs = []string{podLogDir(r.opts.logRoot, ref.Namespace, ref.Name, ref.UID)}
		for _, c := range names {
			r.unlinkLog(ref.Namespace, ref.Name, c.name, c.id)
		}
	} else {
		dirs, _ = filepath.Glob(filepath.Join(r.opts.logRoot, "*_"+string(ref.UID)))
		r.unlinkPodLogs(dirs)
	}
	var errs []error
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// containerName is a container instance's name and raw ID.
type containerName struct{ name, id string }

// containerNames is every container instance of the pod the cache holds,
// and those of cs.
func (r *Runtime) containerNames(uid types.UID, cs []*runtimeapi.Container) []containerName {
	var out []containerName
	r.mu.Lock()
	if pd := r.pods[uid]; pd != nil {
		for id, in := range pd.instances {
			out = append(out, containerName{name: in.status.Name, id: id})
		}
	}
	r.mu.Unlock()
	return append(out, listedNames(cs)...)
}

// listedNames is the names of the containers the runtime listed.
func listedNames(cs []*runtimeapi.Container) []containerName {
	out := make([]containerName, 0, len(cs))
	for _, c := range cs {
		out = append(out, containerName{name: c.GetMetadata().GetName(), id: c.GetId()})
	}
	return out
}

// dropPod forgets the removed pod: its instances, sandbox IP and record.
func (r *Runtime) dropPod(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pd := r.pods[uid]; pd != nil {
		for id := range pd.instances {
			delete(r.byID, id)
			delete(r.cpu, id)
		}
		if pd.sandboxID != "" {
			delete(r.sandboxIPs, pd.sandboxID)
		}
		delete(r.pods, uid)
	}
}

// UpdateContainerResources implements runtime.Resizer through the CRI's
// UpdateContainerResources (kubelet: in-place resize): CPU shares and
// quota, memory limit, as a start would set them.
func (r *Runtime) UpdateContainerResources(ctx context.Context, id string, res corev1.ResourceRequirements) error {
	raw := r.rawID(id)
	linux := resources(&corev1.Container{Resources: res})
	after := r.resizePodCgroup(raw, res)
	if err := r.rs.UpdateContainerResources(ctx, raw, &runtimeapi.ContainerResources{Linux: linux}); err != nil {
		return fmt.Errorf("cri: resize %s: %s", id, grpcMessage(err))
	}
	if err := after(); err != nil {
		r.log.Warn("cannot resize the pod's cgroup", zap.String("id", id), zap.Error(err))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resized[raw] = res
	if in := r.byID[raw]; in != nil {
		cp := res
		in.status.Resources = &cp
	}
	return nil
}
