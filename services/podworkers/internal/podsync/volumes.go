package podsync

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/containerenv"
	"github.com/splitlet/splitlet/services/podworkers/internal/volumes"
)

// Retries of a volume setup that failed (kubelet: the volume reconciler's
// exponential back-off, from half a second to about two minutes).
const (
	volumeRetryBase = 500 * time.Millisecond
	volumeRetryMax  = 2*time.Minute + 2*time.Second
)

// EventFailedMount is the kubelet's reason for a volume that cannot be set up.
const EventFailedMount = "FailedMount"

// ReasonCreateContainerConfigError is the waiting reason of a container
// whose configuration cannot be made (kubelet: a mount or environment that
// cannot be prepared).
const ReasonCreateContainerConfigError = "CreateContainerConfigError"

// setupVolumes sets up (or refreshes) the pod's volumes. A pod whose
// volumes were never all set up must wait: wait is true, with the time
// before the next try. A refresh that fails leaves running containers
// alone (kubelet: a remount error is an Event, not a restart).
func (s *Syncer) setupVolumes(ctx context.Context, pod *corev1.Pod) (wait bool, retry time.Duration) {
	if s.volumes == nil || len(pod.Spec.Volumes) == 0 {
		return false, 0
	}
	vols, err := s.volumes.Setup(ctx, pod)
	if err == nil {
		s.mu.Lock()
		s.vols[pod.UID] = vols
		s.mu.Unlock()
		s.volBackOff.Reset(string(pod.UID))
		return false, 0
	}
	if ctx.Err() != nil {
		return true, 0
	}
	s.log.Info("cannot set up a volume", append(logging.Pod(pod.Namespace, pod.Name, string(pod.UID)), zap.Error(err))...)
	s.mu.Lock()
	_, had := s.vols[pod.UID]
	s.mu.Unlock()
	key := string(pod.UID)
	// A new pod's first failure is tried again shortly before it is
	// reported, so that its status, sent just before, reaches the API
	// server ahead of the Event (kubelet: the status is written before
	// the volume manager reports a failed mount).
	if had || s.volBackOff.Get(key) > 0 {
		s.failedMountEvent(pod, err)
	}
	if had {
		return false, 0
	}
	s.volBackOff.Next(key, time.Now())
	return true, s.volBackOff.Get(key)
}

// failedMountEvent records the kubelet's FailedMount Event for err.
func (s *Syncer) failedMountEvent(pod *corev1.Pod, err error) {
	if s.recorder == nil {
		return
	}
	var se *volumes.SetupError
	msg := err.Error()
	if !errors.As(err, &se) {
		msg = "MountVolume.SetUp failed: " + msg
	}
	s.recorder.Event(kube.PodRef(pod.Namespace, pod.Name, pod.UID), corev1.EventTypeWarning, EventFailedMount, msg)
}

// volumesPending says whether the pod has volumes that were never all set
// up.
func (s *Syncer) volumesPending(pod *corev1.Pod) bool {
	if s.volumes == nil || len(pod.Spec.Volumes) == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, had := s.vols[pod.UID]
	return !had
}

// RemoveVolumes tears down the volumes of a pod whose containers are gone.
func (s *Syncer) RemoveVolumes(pod *corev1.Pod) error {
	if s.volumes == nil {
		return nil
	}
	return s.volumes.TeardownPod(pod)
}

// RemoveVolumesAfterRemove is RemoveVolumes once the runtime's RemovePod
// has succeeded (it released the image volumes).
func (s *Syncer) RemoveVolumesAfterRemove(uid types.UID) error {
	if s.volumes == nil {
		return nil
	}
	return s.volumes.TeardownAfterRemove(uid)
}

// startContainer starts attempt n of c with its mounts and environment
// sources; a mount that cannot be prepared fails the start as the kubelet
// fails it, with CreateContainerConfigError.
func (s *Syncer) startContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, attempt int) (runtime.ContainerStatus, error) {
	if st, err := s.checkStart(pod, c, attempt); err != nil {
		return st, err
	}
	var opts runtime.StartOptions
	for i := range pod.Spec.EphemeralContainers {
		if ec := &pod.Spec.EphemeralContainers[i]; ec.Name == c.Name {
			opts.TargetContainer = ec.TargetContainerName
		}
	}
	if s.recorder != nil && ctx.Err() == nil {
		opts.ImageEvent = func(eventType, reason, message string) { s.event(pod, c.Name, eventType, reason, "%s", message) }
		opts.PodImageEvent = func(eventType, reason, message string) { s.podEvent(pod, eventType, reason, message) }
	}
	s.podDNS(pod, &opts)
	s.podRuntimeHandler(pod, &opts)
	if st, err := s.podDevices(ctx, pod, c, attempt, &opts); err != nil {
		return st, err
	}
	opts.PullSecrets = s.pullSecrets(ctx, pod)
	if s.serviceEnv != nil {
		links := pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
		opts.ServiceEnv = s.serviceEnv(pod.Namespace, links)
	}
	if s.volumes != nil {
		opts.Sources = s.volumes.Sources()
		opts.Allocatable = s.volumes.Allocatable()
		opts.PodDir = s.volumes.PodDir(pod.UID)
		s.mu.Lock()
		vols := s.vols[pod.UID]
		s.mu.Unlock()
		opts.VolumePaths = volumePaths(vols)
		if len(c.VolumeMounts) > 0 {
			var env []string
			if needsEnv(c) {
				// subPathExpr expands against the container's environment.
				env, _ = containerenv.Build(ctx, pod, c, containerenv.Options{PodIP: s.rt.PodIP(pod), HostIP: s.hostIP,
					Sources: opts.Sources, Allocatable: opts.Allocatable, Runtime: s.rt.Type(), VolumePaths: opts.VolumePaths})
			}
			mounts, err := volumes.Mounts(pod, c, vols, env)
			if err != nil {
				st := runtime.ContainerStatus{PodUID: pod.UID, Name: c.Name, Attempt: attempt, Hash: runtime.ContainerHash(c),
					Image: c.Image, State: runtime.StateExited, Reason: ReasonCreateContainerConfigError, Message: err.Error()}
				return st, err
			}
			opts.Mounts = mounts
		}
	}
	return s.rt.StartContainer(ctx, pod, c, attempt, opts)
}

// volumePaths are the host paths of the pod's volumes, by name.
func volumePaths(vols map[string]volumes.Volume) map[string]string {
	out := make(map[string]string, len(vols))
	for name, v := range vols {
		out[name] = v.Path
	}
	return out
}

func needsEnv(c *corev1.Container) bool {
	for _, vm := range c.VolumeMounts {
		if vm.SubPathExpr != "" {
			return true
		}
	}
	return false
}
