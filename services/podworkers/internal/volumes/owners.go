package volumes

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Owners: with a runtime that runs each pod as a user of its own (the
// process runtime as root, WithPodUsers), a pod's volumes are that user's
// and no other pod's:
//
//   - the directories from the pod's directory down to each volume's
//     (<root>/pods/<uid>, volumes/, the plugin's directory) and the
//     directories of configMap, secret, downwardAPI and projected volumes
//     (their tmpfs root and payload directories included) are root's, in
//     the pod's group, mode 0750: the pod passes and reads, no other pod
//     does, and the pod changes nothing the agent writes (kubelet: such
//     volumes are mounted read-only);
//   - their files are the pod's user's (group: the pod's, or its fsGroup),
//     secret and projected ones (service account tokens) of mode 0600 or
//     less: defaultMode and the items' modes keep only their owner bits;
//   - an emptyDir is 0777 as on a kubelet, behind the pod's directory.
//
// Without a pod user (another runtime, or one not running as root) the
// volumes are the agent's, modes as the kubelet makes them.

// owner is the user a pod's volumes belong to.
type owner struct {
	uid, gid int
	// fileGID is the group of the files: the pod's fsGroup, else gid.
	fileGID int
}

// owner is the pod's user, nil when the runtime has none for it.
func (m *Manager) owner(pod *corev1.Pod) (*owner, error) {
	if m.users == nil {
		return nil, nil
	}
	uid, gid, ok, err := m.users.PodUser(pod)
	if err != nil || !ok {
		return nil, err
	}
	return &owner{uid: int(uid), gid: int(gid), fileGID: int(gid)}, nil
}

// dirMode is the mode of a payload volume's tmpfs root.
func (o *owner) dirMode() string {
	if o == nil {
		return "0755"
	}
	return "0750"
}

// restrictDir makes dir root's, in the pod's group, mode 0750 (nil: as it
// is). dir is in a directory no pod can write.
func (o *owner) restrictDir(dir string) error {
	if o == nil {
		return nil
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != 0 || int(st.Gid) != o.gid {
		if err := os.Lchown(dir, 0, o.gid); err != nil {
			return err
		}
	}
	if fi.Mode()&(fs.ModePerm|fs.ModeSetgid|fs.ModeSetuid|fs.ModeSticky) != 0o750 {
		return os.Chmod(dir, 0o750)
	}
	return nil
}

// restrict makes the pod's directory and those under it down to dir (a
// plugin's directory) and restricts them.
func (m *Manager) restrict(uid types.UID, dir string, own *owner) error {
	if own == nil {
		return os.MkdirAll(dir, 0o755)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	if err := m.openRoot(); err != nil {
		return err
	}
	pod := m.podDir(uid)
	rel, err := filepath.Rel(pod, dir)
	if err != nil {
		return err
	}
	d := pod
	if err := own.restrictDir(d); err != nil {
		return err
	}
	for _, el := range strings.Split(rel, string(filepath.Separator)) {
		if el == "." {
			continue
		}
		d = filepath.Join(d, el)
		if err := own.restrictDir(d); err != nil {
			return err
		}
	}
	return nil
}

// openRoot lets pods pass through the root and its pods directory to
// their own: the root gets o+x, the pods directory is 0711 (no pod lists
// the others).
func (m *Manager) openRoot() error {
	pods := filepath.Join(m.root, "pods")
	for dir, want := range map[string]func(fs.FileMode) fs.FileMode{
		m.root: func(p fs.FileMode) fs.FileMode { return p | 0o011 },
		pods:   func(fs.FileMode) fs.FileMode { return 0o711 },
	} {
		fi, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if p := fi.Mode().Perm(); want(p) != p {
			if err := os.Chmod(dir, want(p)); err != nil {
				return err
			}
		}
	}
	return nil
}

// ownPayload gives a payload version's directories to root and the pod's
// group and its files to the pod's user.
func (o *owner) ownPayload(version string) error {
	if o == nil {
		return nil
	}
	return filepath.WalkDir(version, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return o.restrictDir(path)
		}
		return os.Lchown(path, o.uid, o.fileGID)
	})
}

// owns says whether a payload version's entry is as ownPayload leaves it.
func (o *owner) owns(fi fs.FileInfo) bool {
	if o == nil {
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	if fi.IsDir() {
		return st.Uid == 0 && int(st.Gid) == o.gid && fi.Mode().Perm() == 0o750
	}
	return int(st.Uid) == o.uid && int(st.Gid) == o.fileGID
}
