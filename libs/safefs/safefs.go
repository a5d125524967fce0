// Package safefs opens, makes and removes files beneath a directory without
// following symbolic links, for an agent (root) working in directories that
// a less trusted process (a pod's container) can write: a link planted
// there, to /etc/shadow say, must not make the agent truncate, overwrite,
// chown or read what it points at.
//
// A Dir is a directory the caller trusts (its path is resolved normally,
// its last element not through a link); every path given to its methods is
// relative, resolved beneath it, and no element may be a symbolic link. On
// Linux 5.6 and later this is openat2 with RESOLVE_BENEATH and
// RESOLVE_NO_SYMLINKS; where openat2 is missing (older kernels, seccomp
// filters that refuse it) each element is opened in turn with O_NOFOLLOW.
// A file made fresh (Create) replaces whatever entry had its name with a
// new inode opened O_EXCL, so that neither a link nor a hard link to
// another file is written through.
package safefs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Dir is an open directory that paths are resolved beneath.
type Dir struct {
	f    *os.File
	path string
}

// noOpenat2 is set once openat2 is found missing.
var noOpenat2 atomic.Bool

// OpenDir opens the directory at path; path's last element must not be a
// symbolic link.
func OpenDir(path string) (*Dir, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return &Dir{f: os.NewFile(uintptr(fd), path), path: path}, nil
}

// Close closes the directory.
func (d *Dir) Close() error { return d.f.Close() }

// Path is the directory's path.
func (d *Dir) Path() string { return d.path }

func (d *Dir) fd() int { return int(d.f.Fd()) }

// split checks a relative path and returns its elements.
func split(rel string) ([]string, error) {
	if rel == "" || strings.HasPrefix(rel, "/") {
		return nil, fmt.Errorf("safefs: %q is not a relative path", rel)
	}
	var out []string
	for _, el := range strings.Split(rel, "/") {
		switch el {
		case "", ".":
		case "..":
			return nil, fmt.Errorf("safefs: %q leaves its directory", rel)
		default:
			out = append(out, el)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("safefs: %q names no file", rel)
	}
	return out, nil
}

// openat opens rel beneath d with flags (O_NOFOLLOW and O_CLOEXEC added),
// through no symbolic link.
func (d *Dir) openat(rel string, flags int, mode uint32) (int, error) {
	els, err := split(rel)
	if err != nil {
		return -1, err
	}
	flags |= unix.O_NOFOLLOW | unix.O_CLOEXEC
	if !noOpenat2.Load() {
		how := unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
		if flags&(unix.O_CREAT|unix.O_TMPFILE) != 0 {
			how.Mode = uint64(mode)
		}
		fd, err := openat2Retry(d.fd(), strings.Join(els, "/"), &how)
		if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EPERM) {
			return fd, d.pathErr("open", rel, err)
		}
		if errors.Is(err, unix.ENOSYS) {
			noOpenat2.Store(true)
		}
	}
	parent, err := d.walk(els[:len(els)-1])
	if err != nil {
		return -1, d.pathErr("open", rel, err)
	}
	defer closeUnless(parent, d.fd())
	fd, err := openatRetry(parent, els[len(els)-1], flags, mode)
	return fd, d.pathErr("open", rel, err)
}

// walk opens the directories els one after the other beneath d, each
// without following a link, and returns the last one's descriptor (d's own
// for none); the caller closes it unless it is d's.
func (d *Dir) walk(els []string) (int, error) {
	fd := d.fd()
	for _, el := range els {
		next, err := openatRetry(fd, el, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		closeUnless(fd, d.fd())
		if err != nil {
			if errors.Is(err, unix.ELOOP) {
				err = unix.ENOTDIR // a link where a directory should be
			}
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// parent opens the directory holding rel's last element and returns it
// with that element's name.
func (d *Dir) parent(rel string) (int, string, error) {
	els, err := split(rel)
	if err != nil {
		return -1, "", err
	}
	name := els[len(els)-1]
	if len(els) == 1 {
		return d.fd(), name, nil
	}
	fd, err := d.openat(strings.Join(els[:len(els)-1], "/"), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, "", err
	}
	return fd, name, nil
}

func closeUnless(fd, keep int) {
	if fd != keep && fd >= 0 {
		_ = unix.Close(fd)
	}
}

func (d *Dir) pathErr(op, rel string, err error) error {
	if err == nil {
		return nil
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return err
	}
	return &os.PathError{Op: op, Path: d.path + "/" + rel, Err: err}
}

// OpenFile opens rel beneath d through no link, as os.OpenFile would.
func (d *Dir) OpenFile(rel string, flag int, perm os.FileMode) (*os.File, error) {
	fd, err := d.openat(rel, flag, uint32(perm.Perm()))
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), d.path+"/"+rel), nil
}

// Open opens rel for reading.
func (d *Dir) Open(rel string) (*os.File, error) {
	return d.OpenFile(rel, os.O_RDONLY|unix.O_NONBLOCK, 0)
}

// ReadFile reads at most limit bytes of rel (limit <= 0: all of it).
func (d *Dir) ReadFile(rel string, limit int64) ([]byte, error) {
	f, err := d.Open(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, d.pathErr("read", rel, errors.New("not a regular file"))
	}
	var r io.Reader = f
	if limit > 0 {
		r = io.LimitReader(f, limit)
	}
	return io.ReadAll(r)
}

// Create makes rel a new, empty regular file of mode perm and opens it for
// writing: whatever entry had the name (a file, a link, a hard link to a
// file elsewhere) is unlinked first, and the new file is created O_EXCL.
func (d *Dir) Create(rel string, perm os.FileMode, flag int) (*os.File, error) {
	if err := d.Remove(rel); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return d.OpenFile(rel, flag|os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
}

// Remove removes the entry rel names (a link is removed, not followed); a
// directory must be empty.
func (d *Dir) Remove(rel string) error {
	pfd, name, err := d.parent(rel)
	if err != nil {
		return err
	}
	defer closeUnless(pfd, d.fd())
	err = unix.Unlinkat(pfd, name, 0)
	if errors.Is(err, unix.EISDIR) {
		err = unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR)
	}
	return d.pathErr("remove", rel, err)
}

// MkdirAll makes the directory rel and those on its way that are missing,
// with mode perm (less the umask); an element that is a link fails it.
func (d *Dir) MkdirAll(rel string, perm os.FileMode) error {
	els, err := split(rel)
	if err != nil {
		return err
	}
	fd := d.fd()
	defer func() { closeUnless(fd, d.fd()) }()
	for _, el := range els {
		if err := unix.Mkdirat(fd, el, uint32(perm.Perm())); err != nil && !errors.Is(err, unix.EEXIST) {
			return d.pathErr("mkdir", rel, err)
		}
		next, err := openatRetry(fd, el, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ELOOP) {
				err = unix.ENOTDIR
			}
			return d.pathErr("mkdir", rel, err)
		}
		closeUnless(fd, d.fd())
		fd = next
	}
	return nil
}

// Symlink makes rel a symbolic link to target, replacing an entry of that
// name that is not a directory.
func (d *Dir) Symlink(target, rel string) error {
	pfd, name, err := d.parent(rel)
	if err != nil {
		return err
	}
	defer closeUnless(pfd, d.fd())
	if err := unix.Unlinkat(pfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return d.pathErr("symlink", rel, err)
	}
	return d.pathErr("symlink", rel, unix.Symlinkat(target, pfd, name))
}

// Readlink reads the link rel ("" and an error when it is none).
func (d *Dir) Readlink(rel string) (string, error) {
	pfd, name, err := d.parent(rel)
	if err != nil {
		return "", err
	}
	defer closeUnless(pfd, d.fd())
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(pfd, name, buf)
	if err != nil {
		return "", d.pathErr("readlink", rel, err)
	}
	return string(buf[:n]), nil
}

// Lchown gives the entry rel (a link itself, not what it points at) to
// uid and gid (-1 keeps one).
func (d *Dir) Lchown(rel string, uid, gid int) error {
	pfd, name, err := d.parent(rel)
	if err != nil {
		return err
	}
	defer closeUnless(pfd, d.fd())
	return d.pathErr("chown", rel, unix.Fchownat(pfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW))
}

// Chmod sets the mode of rel, which must not be a link.
func (d *Dir) Chmod(rel string, mode os.FileMode) error {
	fd, err := d.openat(rel, unix.O_PATH, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	// fchmod refuses an O_PATH descriptor; its /proc/self/fd entry names
	// the very inode opened.
	return d.pathErr("chmod", rel, unix.Fchmodat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), uint32(unixMode(mode)), 0))
}

// unixMode maps the permission and the setuid, setgid and sticky bits.
func unixMode(m os.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&os.ModeSetuid != 0 {
		u |= unix.S_ISUID
	}
	if m&os.ModeSetgid != 0 {
		u |= unix.S_ISGID
	}
	if m&os.ModeSticky != 0 {
		u |= unix.S_ISVTX
	}
	return u
}

// OpenFile opens rel beneath the directory at root through no link (a
// one-off Dir).
func OpenFile(root, rel string, flag int, perm os.FileMode) (*os.File, error) {
	d, err := OpenDir(root)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.OpenFile(rel, flag, perm)
}

// openat2Retry retries openat2 when interrupted, or (a bounded number of
// times) when a rename raced with the resolution (EAGAIN).
func openat2Retry(dirfd int, path string, how *unix.OpenHow) (int, error) {
	for tries := 0; ; tries++ {
		fd, err := unix.Openat2(dirfd, path, how)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) && tries < 32 {
			continue
		}
		return fd, err
	}
}

func openatRetry(dirfd int, name string, flags int, mode uint32) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, flags, mode)
		if !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
}
