// Package runtime is the container runtime behind the pod workers: one
// interface, three implementations (sim: simulated containers that run
// nothing; process: each container a local child process; cri: containers
// of a CRI runtime, containerd).
//
// The pod workers drive it container by container, as the kubelet's
// kuberuntime manager drives CRI: start, stop, inspect, clean up. Container
// exits are announced on Events, the way PLEG wakes the kubelet's pod
// workers.
//
// # Containers outlive their pod worker
//
// A container belongs to the runtime, not to the pod worker that started
// it: a replica that stops, crashes or hands a partition over leaves its
// containers running, and the next owner of the pods adopts what
// PodContainers reports (kubelet: a restarted kubelet reads its containers
// back from CRI). Four optional interfaces say how a runtime takes part
// (a fifth, Streamer, is for interactive exec):
//
//   - PodLister: the runtime can list the pods it holds, so that pods no
//     source wants any more (deleted while no replica owned them) are found
//     and removed.
//   - Restorer: the runtime keeps nothing outside the process (sim,
//     process); the pod workers tell it what ran, from the last status on
//     the bus, when they take pods over, and let it forget the pods they
//     hand over.
//   - ProcessLocal: the containers are the process's own and die with it
//     (process): they cannot be adopted, so the pod workers stop them when
//     they hand their pods over, and the next owner, told what ran, starts
//     them again as visible restarts.
//   - Relister: the runtime polls another process for its containers (cri);
//     the pod workers make it read them afresh before they adopt pods
//     another replica may have just started containers for.
package runtime

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// State of a container.
type State string

// Container states (CRI's ContainerState).
const (
	StateCreated State = "Created"
	StateRunning State = "Running"
	StateExited  State = "Exited"
	StateUnknown State = "Unknown"
)

// SandboxFailed starts the message of a start that failed because the
// pod's sandbox could not be made (kubelet: the FailedCreatePodSandBox
// Event's message, "Failed to create pod sandbox: <error>"); the pod
// workers record that Event on the pod for it.
const SandboxFailed = "Failed to create pod sandbox: "

// ContainerStatus is what the runtime knows of one container instance.
type ContainerStatus struct {
	// ID is "<runtime>://<id>", unique across the node's life.
	ID      string
	PodUID  types.UID
	Name    string
	Attempt int
	// Hash is ContainerHash of the spec the instance was started from: a
	// pod worker that adopts the instance later compares it with the spec
	// it has now (kubelet: the container hash label).
	Hash  uint64
	State State
	// Image as the spec names it; ImageID as the runtime resolves it.
	Image      string
	ImageID    string
	CreatedAt  time.Time
	StartedAt  time.Time
	FinishedAt time.Time
	ExitCode   int
	// Reason of an exit: Completed, Error, OOMKilled, ContainerCannotRun...
	Reason  string
	Message string
	// LogPath of the container's CRI-format log file, if it has one.
	LogPath string
	// Resources the instance runs with (Resizable of its spec at start, or
	// of its last resize); nil when the runtime cannot say.
	Resources *corev1.ResourceRequirements
}

// Event tells the pod workers that a container of a pod changed state on
// its own (exited), so that the pod's worker syncs.
type Event struct {
	PodUID      types.UID
	ContainerID string
	State       State
}

// LogOptions select part of a container's log (kubelet: PodLogOptions).
type LogOptions struct {
	Follow     bool
	Previous   bool
	Timestamps bool
	// TailLines < 0 means all.
	TailLines int64
	// Since drops lines written before it (zero: all).
	Since time.Time
	// LimitBytes <= 0 means no limit.
	LimitBytes int64
}

// ExecResult is the outcome of a command run in a container's context.
type ExecResult struct {
	Stdout   []byte
	Stderr   []byte
	ExitCode int
}

// ContainerStats are a running container's resource figures.
type ContainerStats struct {
	ContainerID           string
	Name                  string
	StartedAt             time.Time
	CPUUsageCoreNanoSecs  uint64
	CPUUsageNanoCores     uint64
	MemoryWorkingSetBytes uint64
	// RootfsUsedBytes is what the container wrote to its writable layer,
	// LogsUsedBytes what its log files take on disk (current and rotated);
	// 0 where the runtime does not measure them.
	RootfsUsedBytes uint64
	LogsUsedBytes   uint64
	// RootfsInodesUsed and LogsInodesUsed are the inodes of the same.
	RootfsInodesUsed uint64
	LogsInodesUsed   uint64
}

// Runtime runs containers. Every method is safe for concurrent use; calls for
// different pods never wait for each other.
type Runtime interface {
	// Type names the runtime ("sim", "process"); Version its version.
	Type() string
	Version() string
	// PodIP is the IP a pod gets; "" while it has none (kubelet: before
	// its sandbox exists).
	PodIP(pod *corev1.Pod) string
	// StartContainer creates and starts attempt n of a container of the
	// pod; it returns once the container runs, or with the status of a
	// container that could not start (State Exited, Reason set) and an error.
	// opts carry what the pod workers prepared for it: its volumes and where
	// its environment's ConfigMaps and Secrets are read.
	StartContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, attempt int, opts StartOptions) (ContainerStatus, error)
	// StopContainer asks the container to stop (SIGTERM), kills it after
	// grace, and returns when it has stopped. Stopping an exited container
	// is a no-op.
	StopContainer(ctx context.Context, id string, grace time.Duration) error
	// PodContainers lists every container instance of the pod the runtime
	// still holds, running or exited, oldest first.
	PodContainers(uid types.UID) []ContainerStatus
	// RemovePod stops nothing: it forgets the pod's exited containers and
	// removes their logs and files. Its containers must have stopped.
	RemovePod(ctx context.Context, uid types.UID) error
	// Events delivers container exits: every instance that goes from
	// running to exited is announced once, whether it exited on its own or
	// through StopContainer (a start that fails is not: StartContainer
	// reports it). The channel is closed by Close; the runtime never blocks
	// on a slow reader (events queue up).
	Events() <-chan Event
	// Logs writes the log of the named container of the pod (the newest
	// instance, or the one before with Previous) to w.
	Logs(ctx context.Context, uid types.UID, container string, opts LogOptions, w io.Writer) error
	// Exec runs cmd in the container's context, without a terminal.
	Exec(ctx context.Context, uid types.UID, container string, cmd []string, stdin io.Reader, timeout time.Duration) (ExecResult, error)
	// Stats reports the figures of the running containers of the pod.
	Stats(uid types.UID) []ContainerStats
	// Close stops the runtime's own loops (not the containers).
	Close() error
}

// StartOptions are what the pod workers prepare for a container before its
// runtime starts it (kubelet: the RunContainerOptions that
// GenerateRunContainerOptions hands the runtime).
type StartOptions struct {
	// Mounts are the container's volumeMounts, resolved to paths on the
	// host, in the order of the spec.
	Mounts []Mount
	// Sources reads the ConfigMaps and Secrets that envFrom and valueFrom
	// name; nil reads none (a reference that is not optional fails the
	// start with CreateContainerConfigError).
	Sources Sources
	// ServiceEnv are the service environment variables the container gets
	// after its own ("KEY=value"; kubelet: enableServiceLinks).
	ServiceEnv []string
	// ImageEvent, if set, is told of what the runtime did about the image
	// (the kubelet's Pulling and Pulled Events).
	ImageEvent func(eventType, reason, message string)
	// PodImageEvent, if set, is told the same of an image volume's image,
	// which the kubelet records on the pod rather than a container.
	PodImageEvent func(eventType, reason, message string)
	// PullSecrets are the pod's image pull secrets (kubernetes.io/
	// dockerconfigjson or dockercfg) a runtime that pulls images pulls
	// with; never logged.
	PullSecrets []corev1.Secret
	// PodDir is a directory on the host for the files the kubelet manages
	// for the pod (its /etc/hosts, the containers' termination message
	// files); empty: none are made.
	PodDir string
	// VolumePaths are the host paths of the pod's volumes set up, by name
	// (env files of fileKeyRef are read there).
	VolumePaths map[string]string
	// Allocatable is the node's allocatable, the value of a
	// resourceFieldRef the container sets no limit for (kubelet: limits
	// default to the node's allocatable).
	Allocatable corev1.ResourceList
	// DNS, if set, computes the pod's resolver configuration (the
	// kubelet's DNS configurer, with its Events); the runtime calls it when
	// it makes what the pod's containers share, its sandbox. Nil: the
	// runtime's default, the host's resolv.conf.
	DNS func() (*DNSConfig, error)
	// RuntimeHandler, if set, names the runtime handler of the pod's
	// sandbox (kubelet: the handler of the pod's RuntimeClass, looked up
	// when the sandbox is made); its error fails the sandbox. Nil: the
	// runtime's default handler.
	RuntimeHandler func() (string, error)
	// TargetContainer, for an ephemeral container, names the pod's
	// container whose process namespace it joins (targetContainerName:
	// kubectl debug --target); a runtime without such namespaces ignores
	// it.
	TargetContainer string
	// Devices are the container's devices from the device plugins (nil:
	// none); a runtime that is not a DeviceRuntime refuses them.
	Devices *DeviceOptions
}

// Mount is a volume mount of a container, resolved.
type Mount struct {
	// ContainerPath is where the container sees it (volumeMounts.mountPath).
	ContainerPath string
	// HostPath is the directory or file on the host (the volume's
	// directory, or the file or directory subPath names in it).
	HostPath string
	ReadOnly bool
	// Propagation is the mount propagation the spec asks for
	// (mountPropagation; empty: None).
	Propagation corev1.MountPropagationMode
	// Volume is the volume's name; RecursiveReadOnly the mount's
	// recursiveReadOnly (nil: Disabled).
	Volume            string
	RecursiveReadOnly *corev1.RecursiveReadOnlyMode
	// Image, if set, makes the mount an image volume's (volumes[].image):
	// HostPath is the volume's directory, where the runtime mounts the
	// image's filesystem read-only before the container starts; a runtime
	// that is not an ImageVolumes refuses it.
	Image *ImageMount
}

// ImageMount is the image of an image volume mount.
type ImageMount struct {
	// Reference and PullPolicy are the volume's (image.reference,
	// image.pullPolicy; empty: the API server's default for the image).
	Reference  string
	PullPolicy corev1.PullPolicy
	// SubPath is the mount's subPath (subPathExpr expanded), a path that
	// must exist in the image; empty: the image's root.
	SubPath string
}

// ImageVolumes is implemented by a runtime that serves image volumes (cri):
// it pulls each volume's image as a container's (pull policy, the pod's
// pull secrets) and mounts its filesystem read-only when a container
// that mounts the volume starts. Its RemovePod releases the pod's image
// volumes too, and fails when it cannot.
type ImageVolumes interface {
	// ReleaseImageVolumes unmounts the pod's image volumes and lets go of
	// what keeps their filesystems (the pod's containers have stopped).
	ReleaseImageVolumes(ctx context.Context, uid types.UID) error
}

// ImageVolumeError is why a container that mounts an image volume could
// not start: the volume's image could not be made present. The start's
// reason is the image's (ErrImagePull, ImagePullBackOff,
// ErrImageNeverPull), as for the container's own image.
type ImageVolumeError struct {
	Volume, Image string
	Err           error
}

func (e *ImageVolumeError) Error() string {
	return fmt.Sprintf("image volume %q (image %q): %v", e.Volume, e.Image, e.Err)
}

func (e *ImageVolumeError) Unwrap() error { return e.Err }

// Sources reads the objects a container's environment refers to. A missing
// object is reported as the API server reports it (an error for which
// k8s.io/apimachinery's errors.IsNotFound is true).
type Sources interface {
	ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
}

// PodRef names a pod the runtime holds.
type PodRef struct {
	UID       types.UID
	Namespace string
	Name      string
}

// PodLister is implemented by a runtime that can list the pods it holds
// (containers running or exited), whoever started them (kubelet: the
// runtime's pods that HandlePodCleanups compares with the desired ones).
type PodLister interface {
	Pods() []PodRef
}

// Relister is implemented by a runtime that learns what its containers do
// by polling another process (cri: the CRI runtime's relist). Relist reads
// them now: the pod workers call it before they adopt pods taken over from
// another replica, which may have started containers since the last poll.
type Relister interface {
	Relist(ctx context.Context) error
}

// Restorer is implemented by a runtime that cannot read its containers back
// by itself after its process restarted (sim). Before the first sync of the
// pods it takes over, the pod worker hands it what the pods last ran.
type Restorer interface {
	// Restore makes the runtime hold the pod's container instances (oldest
	// first) as they were reported, IDs, attempts, states, exit codes, times
	// and hashes kept, as if it had run them. Running instances go on
	// running. A pod the runtime already holds is left as it is. pod may
	// carry only its UID, namespace and name when its spec is gone.
	Restore(pod *corev1.Pod, instances []ContainerStatus) error
	// Forget drops a pod the pod worker hands over to another replica,
	// stopping nothing: the next owner restores it from what was reported.
	Forget(uid types.UID)
}

// ProcessLocal is implemented by a runtime whose containers live and die
// with the process that runs it (process: its children). Another replica
// cannot adopt them, so a replica that hands pods over stops their
// containers first.
type ProcessLocal interface {
	ProcessLocal()
}

// PodUsers is implemented by a runtime that runs each pod as a user of its
// own (process, as root): the pod workers give the pod's files (its
// volumes) to that user, so that no other pod can read them.
type PodUsers interface {
	// PodUser is the uid and gid the pod runs as, claimed for it on first
	// use and the same for as long as the pod's files exist on the host;
	// ok is false when the runtime runs pods as itself.
	PodUser(pod *corev1.Pod) (uid, gid uint32, ok bool, err error)
	// ReleasePodUser frees the pod's uid once its files are gone (its
	// runtime files and its volumes).
	ReleasePodUser(uid types.UID) error
}

// Streamer is implemented by a runtime with a streaming server of its own
// (CRI), through which a client runs an interactive command: a terminal,
// stdin as typed, output as written, terminal resizes (kubelet: the CRI Exec
// call whose URL the kubelet's server proxies `kubectl exec` to). A runtime
// without one (sim, process) runs commands only through Exec.
type Streamer interface {
	// ExecURL prepares cmd in the newest instance of the named container,
	// which must be running, with the streams asked for, and returns the
	// one-time URL that serves it (the remote command protocol over SPDY).
	// With tty, stderr is merged into stdout and not asked for.
	ExecURL(ctx context.Context, uid types.UID, container string, cmd []string, tty, stdin, stdout, stderr bool) (string, error)
	// AttachURL is the same for the container's own process (`kubectl
	// attach`); tty must be what the container was started with.
	AttachURL(ctx context.Context, uid types.UID, container string, tty, stdin, stdout, stderr bool) (string, error)
}

// PortForwarder is implemented by a runtime whose streaming server forwards
// connections into a pod's network namespace (CRI: the PortForward call
// behind `kubectl port-forward`). A runtime without one (sim, process)
// forwards nothing: its pods have no network of their own.
type PortForwarder interface {
	// PortForwardURL returns the one-time URL that forwards to ports of
	// the pod's ready sandbox (the port-forward protocol over SPDY or
	// WebSocket); ports are those the client named up front, if any.
	PortForwardURL(ctx context.Context, uid types.UID, ports []int32) (string, error)
}

// Resizer is implemented by a runtime that can change a running
// container's CPU and memory in place (kubelet: in-place pod resize,
// UpdateContainerResources); the container then reports res as its
// Resources.
type Resizer interface {
	UpdateContainerResources(ctx context.Context, id string, res corev1.ResourceRequirements) error
}

// Named is implemented by a runtime that reports a name and version of its
// own, apart from its type (CRI: the runtime behind the endpoint, such as
// containerd 1.6.20).
type Named interface {
	RuntimeName() string
	RuntimeVersion() string
}

// NodeVersion is how node.status.nodeInfo.containerRuntimeVersion shows
// the runtime (kubelet: "<runtime name>://<runtime version>" from the CRI
// Version call); a runtime without a name of its own shows its type and
// version.
func NodeVersion(rt Runtime) string {
	if n, ok := rt.(Named); ok && n.RuntimeName() != "" {
		return n.RuntimeName() + "://" + n.RuntimeVersion()
	}
	return rt.Type() + "://" + rt.Version()
}

// ErrNotFound is returned for a container or pod the runtime does not hold.
var ErrNotFound = notFound{}

type notFound struct{}

func (notFound) Error() string { return "runtime: container not found" }

// FindInstance picks, from a pod's container instances (oldest first), the
// newest instance of the named container, or with previous the one before it
// (kubelet: the "previous terminated container" of `kubectl logs -p`).
func FindInstance[C any](uid types.UID, instances []C, nameOf func(C) string, name string, previous bool) (C, error) {
	skip := 0
	if previous {
		skip = 1
	}
	for i := len(instances) - 1; i >= 0; i-- {
		if nameOf(instances[i]) != name {
			continue
		}
		if skip == 0 {
			return instances[i], nil
		}
		skip--
	}
	var zero C
	if previous {
		return zero, fmt.Errorf("%w: previous terminated container %q in pod %s", ErrNotFound, name, uid)
	}
	return zero, fmt.Errorf("%w: container %q in pod %s", ErrNotFound, name, uid)
}

// ContainerHash identifies what of a container's definition needs a new
// instance when it changes: an instance started from a spec with another
// hash no longer matches it and is replaced. As in the kubelet (whose
// container hash covers the name and image, the only fields of a running
// pod's containers the API lets change besides resources, which are
// resized in place), it hashes the name and the image.
func ContainerHash(c *corev1.Container) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(c.Name))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(c.Image))
	return h.Sum64()
}

// MatchesHash says whether an instance stamped with hash (0: unknown,
// taken as matching) was started from a definition c still matches.
func MatchesHash(hash uint64, c *corev1.Container) bool {
	return hash == 0 || hash == ContainerHash(c)
}

// Resizable is the part of a container's resources a running container is
// resized in: CPU and memory requests and limits (kubelet: in-place
// resize), nil maps when there are none.
func Resizable(r corev1.ResourceRequirements) corev1.ResourceRequirements {
	pick := func(l corev1.ResourceList) corev1.ResourceList {
		var out corev1.ResourceList
		for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := l[n]; ok {
				if out == nil {
					out = corev1.ResourceList{}
				}
				out[n] = q.DeepCopy()
			}
		}
		return out
	}
	return corev1.ResourceRequirements{Limits: pick(r.Limits), Requests: pick(r.Requests)}
}

// StartResources is what an instance started from c runs with, for its
// ContainerStatus: nil when c asks for no CPU or memory.
func StartResources(c *corev1.Container) *corev1.ResourceRequirements {
	r := Resizable(c.Resources)
	if r.Limits == nil && r.Requests == nil {
		return nil
	}
	return &r
}

// SameResources compares two Resizable results by quantity.
func SameResources(a, b corev1.ResourceRequirements) bool {
	same := func(x, y corev1.ResourceList) bool {
		if len(x) != len(y) {
			return false
		}
		for n, q := range x {
			if o, ok := y[n]; !ok || q.Cmp(o) != 0 {
				return false
			}
		}
		return true
	}
	return same(a.Limits, b.Limits) && same(a.Requests, b.Requests)
}

// FsStats are a file system's figures: bytes and inodes, available and in
// all.
type FsStats struct {
	AvailableBytes, CapacityBytes uint64
	InodesFree, Inodes            uint64
	// Device is the file system's st_dev (0: not known).
	Device uint64
}

// PodProcesses is a runtime that counts the processes of a pod (kubelet:
// the pod cgroup's pids.current, the pid.available ranking's figure); ok
// is false when it cannot.
type PodProcesses interface {
	PodProcessCount(pod *corev1.Pod) (n uint64, ok bool)
}

// ImageFs is a runtime that keeps images on a file system of its own
// choosing (CRI ImageFsInfo): the eviction manager's imagefs signals.
type ImageFs interface {
	ImageFsStats(ctx context.Context) (FsStats, error)
}
