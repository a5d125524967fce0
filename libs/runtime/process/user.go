package process

import (
	"os"
	"path/filepath"
	"syscall"

	corev1 "k8s.io/api/core/v1"
)

// User is a uid and gid a container's processes run as.
type User struct {
	UID, GID uint32
}

// Nobody is the unprivileged user containers run as by default when the
// runtime runs as root (WithDefaultUser).
var Nobody = User{UID: 65534, GID: 65534}

// WithDefaultUser makes containers that do not ask for a user (pod or
// container securityContext runAsUser) run as u when the runtime's process
// is root, so that a pod cannot read what the agent can (its kubeconfig,
// its bus identity) or touch its processes. Without it, or when the
// runtime is not root, containers run as the runtime's own user.
func WithDefaultUser(u User) Option {
	return func(o *options) { o.defaultUser = &u }
}

// userFor is the user a container runs as, nil for the runtime's own: the
// container's securityContext, then the pod's (kubelet: the container's
// runAsUser/runAsGroup win over the pod's), then the default user when the
// runtime is root.
func (r *Runtime) userFor(p *corev1.Pod, c *corev1.Container) *User {
	var uid, gid *int64
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
	if os.Geteuid() != 0 {
		// an unprivileged runtime cannot switch users; it runs everything
		// as itself (a pod asking for another user is refused at start).
		return nil
	}
	var u User
	switch {
	case uid != nil:
		u.UID = uint32(*uid)
		u.GID = u.UID
	case r.opts.defaultUser != nil:
		u = *r.opts.defaultUser
	default:
		return nil
	}
	if gid != nil {
		u.GID = uint32(*gid)
	}
	return &u
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

// askedUser is the runAsUser the container or the pod sets.
func askedUser(p *corev1.Pod, c *corev1.Container) (int64, bool) {
	if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
		return *c.SecurityContext.RunAsUser, true
	}
	if p.Spec.SecurityContext != nil && p.Spec.SecurityContext.RunAsUser != nil {
		return *p.Spec.SecurityContext.RunAsUser, true
	}
	return 0, false
}
