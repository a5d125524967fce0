package volumes

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// A pod with a Bidirectional mount makes the root a shared mount with its
// subtree (a mount made under a pod's volume then reaches a peer of the
// root, as a container's reaches the host); a pod without one leaves the
// root as it is. The runtime refuses a Bidirectional mount of a volume not
// on a shared mount ("is mounted on / but it is not a shared mount").
func TestBidirectionalMakesRootShared(t *testing.T) {
	if testing.Short() {
		t.Skip("needs root: skipped under -short")
	}
	if os.Geteuid() != 0 {
		t.Fatalf("mounting needs root (uid %d)", os.Geteuid())
	}
	root := filepath.Join(t.TempDir(), "kubelet")
	m := New(root, fakeSources{}, nil)
	plain := pod(corev1.Volume{Name: "mnt", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	plain.Spec.Containers = []corev1.Container{{Name: "c", VolumeMounts: []corev1.VolumeMount{{Name: "mnt", MountPath: "/mnt"}}}}
	if _, err := m.Setup(context.Background(), plain); err != nil {
		t.Fatal(err)
	}
	if _, mountPoint, err := mountOf(root); err != nil || mountPoint {
		t.Fatalf("a pod without Bidirectional: root a mount point %v (%v)", mountPoint, err)
	}

	bi := corev1.MountPropagationBidirectional
	p := plain.DeepCopy()
	p.UID = "bidi"
	p.Spec.Containers[0].VolumeMounts[0].MountPropagation = &bi
	t.Cleanup(func() { _ = syscall.Unmount(root, syscall.MNT_DETACH) })
	vols, err := m.Setup(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if shared, mountPoint, err := mountOf(root); err != nil || !shared || !mountPoint {
		t.Fatalf("root shared %v, mount point %v (%v)", shared, mountPoint, err)
	}
	// A peer of the root sees a mount made under the pod's volume.
	peer := t.TempDir()
	if err := syscall.Mount(root, peer, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(peer, syscall.MNT_DETACH) })
	inner := filepath.Join(vols["mnt"].Path, "tmpfs")
	if err := os.MkdirAll(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", inner, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(inner, syscall.MNT_DETACH) })
	rel, _ := filepath.Rel(root, inner)
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Join(peer, rel), &st); err != nil || st.Type != 0x01021994 { // TMPFS_MAGIC
		t.Errorf("the mount under the volume does not reach the root's peer: type %x, %v", st.Type, err)
	}
	// Once shared, it stays so: another pod changes nothing.
	if _, err := m.Setup(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}
