package service

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/sys/mountinfo"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// shareRootDir shares the root directory's mount (shareRootDir). A pod
// worker that may not mount (an unprivileged container) goes on without:
// only a container whose mounts propagate fails, with the runtime's error.
func (r *Runner) shareRootDir() error {
	err := shareRootDir(r.rootDir())
	if errors.Is(err, unix.EPERM) {
		r.log.Warn("the root directory is not on a shared mount and this process may not mount: containers whose volume mounts propagate mounts (Bidirectional, HostToContainer) will fail to start",
			zap.String("dir", r.rootDir()), zap.Error(err))
		return nil
	}
	return err
}

// shareRootDir puts the root directory on a shared mount, as the kubelet
// does at start: a container whose volume mount propagates mounts
// (Bidirectional, HostToContainer) needs its source on a shared mount, and
// containerd refuses to create it otherwise. A directory already on a
// shared mount (the host's own, or this one after a restart) is left as it
// is. Otherwise it is bind-mounted onto itself and made rshared; the bind is
// recursive so that the volumes of pods running across a restart stay
// where they are. The bind stays when the stage stops, as the kubelet's
// does: containers that run on keep propagating through it. Replicas of a
// node share the directory: a lock file under it orders them.
func shareRootDir(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	unlock, err := lockDir(real)
	if err != nil {
		return err
	}
	defer unlock()
	shared, err := onSharedMount(real)
	if err != nil || shared {
		return err
	}
	if err := unix.Mount(real, real, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind-mounting the root directory %s onto itself: %w", real, err)
	}
	if err := unix.Mount("", real, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("making the root directory %s rshared: %w", real, err)
	}
	return nil
}

// onSharedMount says whether path lies on a mount with shared propagation:
// the deepest mount point at or above it, the last one mounted there.
func onSharedMount(path string) (bool, error) {
	mounts, err := mountinfo.GetMounts(mountinfo.ParentsFilter(path))
	if err != nil {
		return false, fmt.Errorf("reading the mounts above %s: %w", path, err)
	}
	var below *mountinfo.Info
	for _, m := range mounts {
		if below == nil || len(m.Mountpoint) >= len(below.Mountpoint) {
			below = m
		}
	}
	if below == nil {
		return false, fmt.Errorf("no mount holds %s", path)
	}
	for _, opt := range strings.Fields(below.Optional) {
		if strings.HasPrefix(opt, "shared:") {
			return true, nil
		}
	}
	return false, nil
}

// lockDir takes an exclusive lock on a file in dir until the returned
// function is called.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".mount.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", f.Name(), err)
	}
	return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
}
