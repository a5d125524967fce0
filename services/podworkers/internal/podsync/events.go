package podsync

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/runtime"
)

// Container lifecycle Events, with the kubelet's reasons and messages
// (kubelet events package and kuberuntime), recorded on the pod with the
// container's field path so that `kubectl describe pod` lists them by
// container.
const (
	EventCreated = "Created"
	EventStarted = "Started"
	EventFailed  = "Failed"
	EventKilling = "Killing"
	EventBackOff = "BackOff"
	// EventFailedCreatePodSandBox: the pod's sandbox could not be made
	// (kubelet: a Warning on the pod, "Failed to create pod sandbox: ...").
	EventFailedCreatePodSandBox = "FailedCreatePodSandBox"
)

// Image failures a runtime reports as a start's waiting reason (kubelet:
// the image manager's errors).
const (
	reasonErrImagePull      = "ErrImagePull"
	reasonImagePullBackOff  = "ImagePullBackOff"
	reasonErrImageNeverPull = "ErrImageNeverPull"
)

// event records an Event on a container of the pod, if a recorder is set.
func (s *Syncer) event(pod *corev1.Pod, container, eventType, reason, format string, args ...any) {
	if s.recorder == nil {
		return
	}
	s.recorder.Eventf(kube.ContainerRef(pod, container), eventType, reason, format, args...)
}

// podEvent records an Event on the pod itself, if a recorder is set.
func (s *Syncer) podEvent(pod *corev1.Pod, eventType, reason, message string) {
	if s.recorder == nil {
		return
	}
	s.recorder.Event(kube.PodRef(pod.Namespace, pod.Name, pod.UID), eventType, reason, message)
}

// podDesc names a pod in messages as the kubelet does: name_namespace(uid).
func podDesc(pod *corev1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}

// startEvents records what a start attempt did: Created and Started, or
// why it failed (kubelet: startContainer's and the image manager's
// Events). A start a cancelled sync cut short records nothing.
func (s *Syncer) startEvents(ctx context.Context, pod *corev1.Pod, c *corev1.Container, st runtime.ContainerStatus, err error) {
	if ctx.Err() != nil {
		return
	}
	if err == nil {
		s.event(pod, c.Name, corev1.EventTypeNormal, EventCreated, "Container created")
		s.event(pod, c.Name, corev1.EventTypeNormal, EventStarted, "Container started")
		return
	}
	msg := st.Message
	if msg == "" {
		msg = err.Error()
	}
	var ive *runtime.ImageVolumeError
	if errors.As(err, &ive) {
		s.imageVolumeEvents(pod, c, ive.Image, st.Reason, msg)
		return
	}
	switch st.Reason {
	case reasonErrImagePull:
		s.event(pod, c.Name, corev1.EventTypeWarning, EventFailed, "Failed to pull image %q: %s", c.Image, msg)
		s.event(pod, c.Name, corev1.EventTypeWarning, EventFailed, "Error: %s", st.Reason)
	case reasonImagePullBackOff:
		s.event(pod, c.Name, corev1.EventTypeNormal, EventBackOff, "Back-off pulling image %q", c.Image)
		s.event(pod, c.Name, corev1.EventTypeWarning, EventFailed, "Error: %s", st.Reason)
	case reasonErrImageNeverPull:
		s.event(pod, c.Name, corev1.EventTypeWarning, reasonErrImageNeverPull, "%s", msg)
		s.event(pod, c.Name, corev1.EventTypeWarning, EventFailed, "Error: %s", st.Reason)
	default:
		if strings.HasPrefix(msg, runtime.SandboxFailed) {
			// on the pod, not a container: no container was made.
			if s.recorder != nil {
				s.recorder.Event(kube.PodRef(pod.Namespace, pod.Name, pod.UID), corev1.EventTypeWarning, EventFailedCreatePodSandBox, msg)
			}
			return
		}
		if st.ID != "" {
			// created, then it would not start (kubelet: Created, then Failed).
			s.event(pod, c.Name, corev1.EventTypeNormal, EventCreated, "Container created")
		}
		s.event(pod, c.Name, corev1.EventTypeWarning, EventFailed, "Error: %s", msg)
	}
}

// imageVolumeEvents records why an image volume's image kept the
// container from starting: the image manager's Events on the pod, then
// "Error: <reason>" on the container (kubelet: getImageVolumes, then
// toKubeContainerImageVolumes).
func (s *Syncer) imageVolumeEvents(pod *corev1.Pod, c *corev1.Container, image, reason, msg string) {
	switch reason {
	case reasonErrImagePull:
		s.podEvent(pod, corev1.EventTypeWarning, EventFailed, fmt.Sprintf("Failed to pull image %q: %s", image, msg))
	case reasonImagePullBackOff:
		s.podEvent(pod, corev1.EventTypeNormal, EventBackOff, fmt.Sprintf("Back-off pulling image %q", image))
	case reasonErrImageNeverPull:
		s.podEvent(pod, corev1.EventTypeWarning, reasonErrImageNeverPull, msg)
	}
	s.event(pod, c.Name, corev1.EventTypeWarning, EventFailed, "Error: %s", reason)
}

// backOffEvent: a restart waits out the crash-loop back-off.
func (s *Syncer) backOffEvent(pod *corev1.Pod, c *corev1.Container) {
	s.event(pod, c.Name, corev1.EventTypeWarning, EventBackOff, "Back-off restarting failed container %s in pod %s", c.Name, podDesc(pod))
}
