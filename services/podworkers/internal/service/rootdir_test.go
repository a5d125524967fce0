package service

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
)

// --runtime=cri: a privileged init container mounts a tmpfs into an
// emptyDir it mounts Bidirectional; the mount reaches the host and so the
// next init container, which mounts the emptyDir plainly; a third takes it
// down again (the shape of the node suite's recursive read-only specs).
// containerd creates a Bidirectional mount only from a shared mount: the
// pod workers put their root directory on one at start.
func TestPropagatedMountReachesTheNextContainer(t *testing.T) {
	e, _ := criEnv(t, "pw-propagation")
	r := e.startReplica(t, config.RuntimeCRI, nil)
	bidirectional := []corev1.VolumeMount{{Name: "mnt", MountPath: "/mnt", MountPropagation: ptr.To(corev1.MountPropagationBidirectional)}}
	privileged := &corev1.SecurityContext{Privileged: ptr.To(true)}
	p := newPod(t, e.cs, "propagation", func(p *corev1.Pod) {
		p.Spec.NodeName = e.node
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		p.Spec.Volumes = []corev1.Volume{{Name: "mnt", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		p.Spec.InitContainers = []corev1.Container{
			{Name: "mount", Image: "busybox", ImagePullPolicy: corev1.PullIfNotPresent, SecurityContext: privileged, VolumeMounts: bidirectional,
				Command: []string{"sh", "-euxc", "mkdir -p /mnt/tmpfs && mount -t tmpfs none /mnt/tmpfs && echo hi > /mnt/tmpfs/marker"}},
			{Name: "check", Image: "busybox", ImagePullPolicy: corev1.PullIfNotPresent,
				VolumeMounts: []corev1.VolumeMount{{Name: "mnt", MountPath: "/mnt"}},
				Command:      []string{"sh", "-euxc", "grep -q hi /mnt/tmpfs/marker"}},
			{Name: "unmount", Image: "busybox", ImagePullPolicy: corev1.PullIfNotPresent, SecurityContext: privileged, VolumeMounts: bidirectional,
				Command: []string{"umount", "/mnt/tmpfs"}},
		}
		p.Spec.Containers[0].Command = []string{"true"}
		p.Spec.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent
	})
	e.track(p)
	e.send(bus.OpAdd, p)
	eventually(t, 2*time.Minute, "the app container done", func() bool {
		st, _ := e.get(p.UID)
		return st != nil && len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Terminated != nil
	})
	st, _ := e.get(p.UID)
	for _, c := range append(st.InitContainerStatuses, st.ContainerStatuses...) {
		if term := c.State.Terminated; term == nil || term.ExitCode != 0 {
			t.Errorf("container %s: %+v, want exited 0", c.Name, c.State)
		}
	}
	if shared, err := onSharedMount(r.rootDir()); err != nil || !shared {
		t.Errorf("root directory %s on a shared mount: %v, %v", r.rootDir(), shared, err)
	}
}
