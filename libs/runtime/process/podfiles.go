package process

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/crilog"
	"github.com/splitlet/splitlet/libs/safefs"
)

// maxTerminationMessage is the most of a termination message file read
// (kubelet: 4 KiB).
const maxTerminationMessage = 4096

// A pod's files are <root>/pods/<uid>/<container>/: the container's
// directory (its working directory by default) holds its logs, its volume
// mounts as links and its termination message file. The container may
// write there, so the runtime, which is root, makes, opens and removes
// everything beneath the pod's directory through no symbolic link
// (package safefs): a link the container planted where a log or a mount
// goes is replaced, never followed.
//
// With pod users, the pod's directory is root's, mode 0750, in the pod's
// group: the pod may enter it but not change it, and no other pod may
// enter it; the container's directory is the pod's user's, mode 0700.

// makeRoot makes the runtime's root and pods directories; with pod users
// they are 0711, so that a pod reaches its own directory without listing
// the others.
func makeRoot(root string, podUsers bool) error {
	pods := filepath.Join(root, "pods")
	if err := os.MkdirAll(pods, 0o750); err != nil {
		return err
	}
	if !podUsers {
		return nil
	}
	for _, d := range []string{root, pods} {
		if err := os.Chmod(d, 0o711); err != nil {
			return err
		}
	}
	return nil
}

// podFiles is a pod's directory, open, and the owner of the container
// directories and files the runtime makes in it.
type podFiles struct {
	dir      *safefs.Dir
	uid, gid int // -1: the runtime's own
	podUser  bool
}

// podFiles makes and opens the pod's directory. user is the container's.
func (r *Runtime) podFiles(p *corev1.Pod, user *User) (*podFiles, error) {
	pf := &podFiles{uid: -1, gid: -1}
	owner := user
	if r.users != nil {
		uid, gid, _, err := r.PodUser(p)
		if err != nil {
			return nil, err
		}
		owner, pf.podUser = &User{UID: uid, GID: gid}, true
	}
	if owner != nil {
		pf.uid, pf.gid = int(owner.UID), int(owner.GID)
	}
	dir := r.podDir(p.UID)
	if err := os.Mkdir(dir, 0o750); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	d, err := safefs.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	pf.dir = d
	if pf.podUser {
		// the pod's directory is in the runtime's own: no pod can put a
		// link in its place.
		if err := os.Lchown(dir, 0, pf.gid); err != nil {
			d.Close()
			return nil, err
		}
		if err := os.Chmod(dir, 0o750); err != nil {
			d.Close()
			return nil, err
		}
	}
	return pf, nil
}

// Close closes the pod's directory.
func (pf *podFiles) Close() { _ = pf.dir.Close() }

// containerDir makes the container's directory and gives it to its owner.
func (pf *podFiles) containerDir(name string) error {
	if err := pf.dir.MkdirAll(name, 0o750); err != nil {
		return err
	}
	if pf.uid >= 0 {
		if err := pf.dir.Lchown(name, pf.uid, pf.gid); err != nil {
			return err
		}
	}
	if pf.podUser {
		return pf.dir.Chmod(name, 0o700)
	}
	return nil
}

// linkMounts gives a container its volumes the only way a process without
// a mount namespace of its own can have them: each mount is a symbolic link
// at its mountPath under the container's directory (a volume mounted at
// /etc/config is <container dir>/etc/config, ./etc/config from the default
// working directory), pointing at the volume on the host. Read-only is not
// enforced. A link the container put on the way fails the start.
func (pf *podFiles) linkMounts(name string, mounts []runtime.Mount) error {
	for _, m := range mounts {
		if m.Image != nil {
			// admission refuses such pods; never run one without its volume.
			return fmt.Errorf("volume %q: image volumes are not supported by the process runtime (they need the cri runtime)", m.Volume)
		}
		rel := strings.TrimLeft(filepath.Clean("/"+m.ContainerPath), "/")
		if rel == "" {
			return fmt.Errorf("volume mount at %q: the process runtime cannot mount over the container's root", m.ContainerPath)
		}
		link := name + "/" + rel
		if parent := filepath.Dir(link); parent != name {
			if err := pf.dir.MkdirAll(parent, 0o755); err != nil {
				return fmt.Errorf("volume mount at %q: %w", m.ContainerPath, err)
			}
		}
		if got, err := pf.dir.Readlink(link); err == nil && got == m.HostPath {
			continue
		}
		if err := pf.dir.Symlink(m.HostPath, link); err != nil {
			return fmt.Errorf("volume mount at %q: %w", m.ContainerPath, err)
		}
	}
	return nil
}

// terminationFile makes the container's termination message file, empty,
// at its terminationMessagePath under the container's directory (as its
// mounts are), and returns it relative to the pod's directory ("" for
// none). What was there (the last instance's message, a link) is replaced.
func (pf *podFiles) terminationFile(c *corev1.Container) (string, error) {
	if c.TerminationMessagePath == "" {
		return "", nil
	}
	rel := strings.TrimLeft(filepath.Clean("/"+c.TerminationMessagePath), "/")
	if rel == "" {
		return "", fmt.Errorf("terminationMessagePath %q names no file", c.TerminationMessagePath)
	}
	file := c.Name + "/" + rel
	if parent := filepath.Dir(file); parent != c.Name {
		if err := pf.dir.MkdirAll(parent, 0o755); err != nil {
			return "", fmt.Errorf("terminationMessagePath %q: %w", c.TerminationMessagePath, err)
		}
	}
	f, err := pf.dir.Create(file, 0o600, 0)
	if err != nil {
		return "", fmt.Errorf("terminationMessagePath %q: %w", c.TerminationMessagePath, err)
	}
	err = f.Close()
	if err == nil && pf.uid >= 0 {
		err = pf.dir.Lchown(file, pf.uid, pf.gid)
	}
	if err != nil {
		return "", fmt.Errorf("terminationMessagePath %q: %w", c.TerminationMessagePath, err)
	}
	return file, nil
}

// createLog makes a fresh log file (rel to the pod's directory).
func (pf *podFiles) createLog(rel string) (*crilog.File, error) {
	f, err := pf.dir.Create(rel, 0o640, os.O_APPEND)
	if err != nil {
		return nil, err
	}
	return crilog.NewFile(f), nil
}

// beneath is path relative to the pod's directory, or an error when it is
// not in it.
func (r *Runtime) beneath(uid types.UID, path string) (string, error) {
	rel, err := filepath.Rel(r.podDir(uid), path)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return "", fmt.Errorf("process: %s is not a file of pod %s", path, uid)
	}
	return rel, nil
}

// openLog opens a container's log for reading, through no link.
func (r *Runtime) openLog(uid types.UID, path string) (*os.File, error) {
	rel, err := r.beneath(uid, path)
	if err != nil {
		return nil, err
	}
	return safefs.OpenFile(r.podDir(uid), rel, os.O_RDONLY|unix.O_NONBLOCK, 0)
}

// removeLog removes an old instance's log (a link is removed, not what it
// points at).
func (r *Runtime) removeLog(uid types.UID, path string) {
	rel, err := r.beneath(uid, path)
	if err != nil {
		return
	}
	d, err := safefs.OpenDir(r.podDir(uid))
	if err != nil {
		return
	}
	defer d.Close()
	_ = d.Remove(rel)
}

// terminationMessage reads what the exited container wrote to its
// termination message file (at most 4 KiB, through no link).
func (r *Runtime) terminationMessage(c *container) string {
	if c.termMsg == "" {
		return ""
	}
	d, err := safefs.OpenDir(r.podDir(c.status.PodUID))
	if err != nil {
		return ""
	}
	defer d.Close()
	b, err := d.ReadFile(c.termMsg, maxTerminationMessage)
	if err != nil {
		r.log.Debug("cannot read a termination message", zap.String(logging.FieldUID, string(c.status.PodUID)),
			zap.String("container", c.status.Name), zap.Error(err))
		return ""
	}
	return string(b)
}
