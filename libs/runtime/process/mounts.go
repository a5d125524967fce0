package process

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/splitlet/splitlet/libs/runtime"
)

// linkMounts gives a container its volumes the only way a process without
// a mount namespace of its own can have them: each mount is a symbolic link
// at its mountPath under the container's directory (a volume mounted at
// /etc/config is <container dir>/etc/config, ./etc/config from the default
// working directory), pointing at the volume on the host. Read-only is not
// enforced.
func linkMounts(cdir string, mounts []runtime.Mount) error {
	for _, m := range mounts {
		rel := strings.TrimLeft(filepath.Clean("/"+m.ContainerPath), "/")
		if rel == "" {
			return fmt.Errorf("volume mount at %q: the process runtime cannot mount over the container's root", m.ContainerPath)
		}
		link := filepath.Join(cdir, rel)
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return fmt.Errorf("volume mount at %q: %w", m.ContainerPath, err)
		}
		if got, err := os.Readlink(link); err == nil && got == m.HostPath {
			continue
		}
		_ = os.Remove(link)
		if err := os.Symlink(m.HostPath, link); err != nil {
			return fmt.Errorf("volume mount at %q: %w", m.ContainerPath, err)
		}
	}
	return nil
}
