package cri

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"
)

// DefaultContainerLogDir is where the kubelet links every container's log
// under a name that says whose it is, for log shippers that read
// /var/log/containers/*.log.
const DefaultContainerLogDir = "/var/log/containers"

// maxFileName is the longest file name ext4 takes; longer link names are
// cut to it, as the kubelet cuts them.
const maxFileName = 255

// WithContainerLogDir sets the directory of the containers' log links
// (default DefaultContainerLogDir).
func WithContainerLogDir(dir string) Option {
	return func(o *options) { o.containerLogDir = or(dir, o.containerLogDir) }
}

// logLink is the link of a container's log in dir, as the kubelet names
// it: <pod>_<namespace>_<container>-<containerID>.log, cut to fit a file
// name. Pod, namespace and container names hold no '_', so the name is
// unambiguous.
func logLink(dir, namespace, pod, container, id string) string {
	const suffix = ".log"
	name := pod + "_" + namespace + "_" + container + "-" + id
	if len(name) > maxFileName-len(suffix) {
		name = name[:maxFileName-len(suffix)]
	}
	return filepath.Join(dir, name+suffix)
}

// linkLog links a started container's log file into the container log
// directory (kubelet: the legacy log symlink made after a start). A log
// file that does not exist gets no link, which would dangle.
func (r *Runtime) linkLog(namespace, pod, container, id, logPath string) {
	if _, err := os.Stat(logPath); errors.Is(err, fs.ErrNotExist) {
		return
	}
	link := logLink(r.opts.containerLogDir, namespace, pod, container, id)
	err := os.MkdirAll(r.opts.containerLogDir, 0o755)
	if err == nil {
		err = os.Symlink(logPath, link)
	}
	if err != nil && !errors.Is(err, fs.ErrExist) {
		r.log.Warn("cannot link a container's log", zap.String("path", link), zap.String("id", id), zap.Error(err))
	}
}

// unlinkLog removes a removed container's log link.
func (r *Runtime) unlinkLog(namespace, pod, container, id string) {
	link := logLink(r.opts.containerLogDir, namespace, pod, container, id)
	if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.log.Warn("cannot remove a container's log link", zap.String("path", link), zap.Error(err))
	}
}

// unlinkPodLogs removes every link of the container log directory that
// points into the removed pod's log directories podDirs: a read of the
// whole directory, for a pod whose namespace and name are not known.
func (r *Runtime) unlinkPodLogs(podDirs []string) {
	if len(podDirs) == 0 {
		return
	}
	links, _ := filepath.Glob(filepath.Join(r.opts.containerLogDir, "*.log"))
	for _, link := range links {
		target, err := os.Readlink(link)
		if err != nil {
			continue
		}
		for _, d := range podDirs {
			if strings.HasPrefix(target, d+string(filepath.Separator)) {
				r.unlinkLogPath(link)
				break
			}
		}
	}
}

func (r *Runtime) unlinkLogPath(link string) {
	if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.log.Warn("cannot remove a container's log link", zap.String("path", link), zap.Error(err))
	}
}
