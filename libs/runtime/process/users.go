package process

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	corev1 "k8s.io/api/core/v1"
)

// User is a uid and gid a container's processes run as.
type User struct {
	UID, GID uint32
}

// WithPodUsers makes a runtime that runs as root run each pod as a user of
// its own: a uid from rng, and the gid of the same number, claimed for the
// pod in claimDir (claims.go) and kept until ReleasePodUser. claimDir
// is shared by every runtime of the host, so that no two pods of the host
// get the same uid; it is created with mode 0700 and must be owned by the
// runtime's user. Without it a root runtime runs containers as itself (or
// as the runAsUser they ask for).
func WithPodUsers(rng UserRange, claimDir string) Option {
	return func(o *options) { o.userRange, o.userDir = &rng, claimDir }
}

// WithAllowRoot lets, with WithPodUsers, a container that asks for uid or
// gid 0 (runAsUser, runAsGroup) run as root. Default off: such a container
// is refused (CreateContainerConfigError), since a root process on the
// agent's host reads the agent's credentials and every pod's files.
func WithAllowRoot(on bool) Option { return func(o *options) { o.allowRoot = on } }

// PodUser implements runtime.PodUsers: the uid and gid the pod runs as,
// claimed for it on first use; ok is false when the runtime runs pods as
// itself.
func (r *Runtime) PodUser(p *corev1.Pod) (uid, gid uint32, ok bool, err error) {
	if r.users == nil {
		return 0, 0, false, nil
	}
	n, err := r.users.Claim(p.UID, p.Namespace, p.Name)
	if err != nil {
		return 0, 0, false, err
	}
	return n, n, true, nil
}

// userFor is the user a container runs as (nil: the runtime's own), or why
// it may not run:
//
//   - a runtime that is not root cannot switch users: a container asking
//     for another uid is refused;
//   - a root runtime without pod users runs it as it asks (runAsUser and
//     runAsGroup, the container's over the pod's), else as itself;
//   - with pod users, the pod's own uid and gid; runAsUser or runAsGroup 0
//     is root, refused unless WithAllowRoot; any other value than the
//     pod's own is refused, since it could be another pod's.
//
// runAsNonRoot refuses a container that would run as root, with the
// kubelet's messages.
func (r *Runtime) userFor(p *corev1.Pod, c *corev1.Container) (*User, error) {
	uid, gid := askedIDs(p, c)
	euid := os.Geteuid()
	var u *User
	switch {
	case euid != 0:
		if uid != nil && *uid != int64(euid) {
			return nil, fmt.Errorf("runAsUser %d: the process runtime runs as uid %d and cannot switch users", *uid, euid)
		}
	case r.users == nil:
		if uid != nil {
			u = &User{UID: uint32(*uid), GID: uint32(*uid)}
			if gid != nil {
				u.GID = uint32(*gid)
			}
		}
	default:
		var err error
		if u, err = r.podUser(p, uid, gid); err != nil {
			return nil, err
		}
	}
	return u, checkNonRoot(p, c, u, uid)
}

// podUser applies the pod-user rules of userFor.
func (r *Runtime) podUser(p *corev1.Pod, uid, gid *int64) (*User, error) {
	own, err := r.users.Claim(p.UID, p.Namespace, p.Name)
	if err != nil {
		return nil, err
	}
	u := &User{UID: own, GID: own}
	if uid != nil {
		switch *uid {
		case 0:
			u.UID, u.GID = 0, 0 // root's own group, unless runAsGroup says
		case int64(own):
		default:
			return nil, fmt.Errorf("runAsUser %d is refused: the process runtime runs each pod as a user of its own (uid %d for this pod) and cannot run it as another, which may be another pod's", *uid, own)
		}
	}
	if gid != nil {
		switch *gid {
		case 0, int64(own):
			u.GID = uint32(*gid)
		default:
			return nil, fmt.Errorf("runAsGroup %d is refused: the process runtime runs each pod in a group of its own (gid %d for this pod) and cannot run it in another, which may be another pod's", *gid, own)
		}
	}
	if (u.UID == 0 || u.GID == 0) && !r.opts.allowRoot {
		what := "runAsUser"
		if u.UID != 0 {
			what = "runAsGroup"
		}
		return nil, fmt.Errorf("%s 0 is refused: this node runs no container as root, which would read the agent's credentials and every pod's files (podworkers.process-allow-root is off)", what)
	}
	return u, nil
}

// checkNonRoot is the kubelet's runAsNonRoot check (verifyRunAsNonRoot).
func checkNonRoot(p *corev1.Pod, c *corev1.Container, u *User, asked *int64) error {
	nonRoot := p.Spec.SecurityContext != nil && p.Spec.SecurityContext.RunAsNonRoot != nil && *p.Spec.SecurityContext.RunAsNonRoot
	if c.SecurityContext != nil && c.SecurityContext.RunAsNonRoot != nil {
		nonRoot = *c.SecurityContext.RunAsNonRoot
	}
	if !nonRoot {
		return nil
	}
	uid := uint32(os.Geteuid())
	if u != nil {
		uid = u.UID
	}
	switch {
	case uid != 0:
		return nil
	case asked != nil:
		return fmt.Errorf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", p.Name+"_"+p.Namespace+"("+string(p.UID)+")", c.Name)
	default:
		return errors.New("container has runAsNonRoot and image will run as root")
	}
}

// askedIDs are the runAsUser and runAsGroup the container sets, else the
// pod's.
func askedIDs(p *corev1.Pod, c *corev1.Container) (uid, gid *int64) {
	if sc := p.Spec.SecurityContext; sc != nil {
		uid, gid = sc.RunAsUser, sc.RunAsGroup
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			gid = sc.RunAsGroup
		}
	}
	return uid, gid
}

// credential is the SysProcAttr credential of a user (no supplementary
// groups: the runtime's are not passed on).
func credential(u *User) *syscall.Credential {
	if u == nil {
		return nil
	}
	return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: []uint32{}}
}

// reachable says whether user u can enter dir: every directory on the way
// is searchable by others, or by u as its owner or group (no ACLs).
func reachable(dir string, u *User) bool {
	if u.UID == 0 {
		return true
	}
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return false
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		mode := fi.Mode().Perm()
		switch {
		case ok && st.Uid == u.UID:
			if mode&0o100 == 0 {
				return false
			}
		case ok && st.Gid == u.GID:
			if mode&0o010 == 0 {
				return false
			}
		default:
			if mode&0o001 == 0 {
				return false
			}
		}
		if parent := filepath.Dir(d); parent == d {
			return true
		}
	}
}
