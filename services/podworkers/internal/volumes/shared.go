package volumes

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
)

// bidirectional tells whether a container of the pod mounts a volume with
// Bidirectional propagation.
func bidirectional(pod *corev1.Pod) bool {
	var cs []corev1.Container
	cs = append(append(cs, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for _, c := range cs {
		for _, vm := range c.VolumeMounts {
			if vm.MountPropagation != nil && *vm.MountPropagation == corev1.MountPropagationBidirectional {
				return true
			}
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		for _, vm := range c.VolumeMounts {
			if vm.MountPropagation != nil && *vm.MountPropagation == corev1.MountPropagationBidirectional {
				return true
			}
		}
	}
	return false
}

// sharedRoot makes the root a shared mount with its subtree, the first
// time a pod asks for Bidirectional propagation (kubelet: MakeRShared of
// its root directory): the runtime refuses such a mount of a volume that
// is not on a shared mount, and a mount a container makes under it must
// reach the host and the pod's other containers. A root on a shared mount
// already is left alone; else it is bind-mounted onto itself (unless it is
// a mount point) and made rshared. The mount stays, as the kubelet's does:
// a restarted pod worker finds the root shared.
func (m *Manager) sharedRoot() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.shared {
		return nil
	}
	if err := os.MkdirAll(m.root, 0o750); err != nil {
		return err
	}
	root, err := filepath.EvalSymlinks(m.root)
	if err != nil {
		return err
	}
	shared, mountPoint, err := mountOf(root)
	if err != nil {
		return err
	}
	if !shared {
		if !mountPoint {
			if err := syscall.Mount(root, root, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
				return fmt.Errorf("bind-mount %s onto itself: %w", root, err)
			}
		}
		if err := syscall.Mount("", root, "", syscall.MS_SHARED|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("make %s rshared: %w", root, err)
		}
	}
	m.shared = true
	return nil
}

// mountOf finds the mount dir is on (the one with the longest mount point
// at or above dir, in /proc/self/mountinfo): whether it is shared (its
// optional fields hold a shared:N peer group) and whether dir is its
// mount point.
func mountOf(dir string) (shared, mountPoint bool, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, false, err
	}
	defer f.Close()
	best := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 7 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if mp != dir && mp != "/" && !strings.HasPrefix(dir, mp+"/") {
			continue
		}
		if len(mp) < len(best) {
			continue
		}
		best, shared = mp, false
		// optional fields: from the seventh to the "-" separator.
		for _, opt := range fields[6:] {
			if opt == "-" {
				break
			}
			shared = shared || strings.HasPrefix(opt, "shared:")
		}
	}
	if err := sc.Err(); err != nil {
		return false, false, err
	}
	if best == "" {
		return false, false, fmt.Errorf("no mount holds %s", dir)
	}
	return shared, best == dir, nil
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) of a path
// in /proc/self/mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
