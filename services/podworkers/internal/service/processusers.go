package service

import (
	"fmt"
	"os"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/splitlet/splitlet/libs/runtime/process"
)

// podUsers are the process runtime's options for pods' users (podworkers
// as root): a uid of its own for each pod, root only when allowed.
func (c *Config) podUsers() []process.Option {
	dir := c.ProcessUIDDir
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "splitlet-process-uids")
	}
	return []process.Option{process.WithPodUsers(c.processUIDs, dir), process.WithAllowRoot(c.ProcessAllowRoot)}
}

// openWayForPods makes the data directory, under which the runtime's root
// (and by default the volumes' root) is, mode 0711: a pod passes through
// it to its own directory but lists nothing and reads none of the agent's
// files there (the NATS store, kubeconfigs or seeds kept there). The
// default data directory's parent, <tmp>/splitlet, is made so too. A
// directory above that pods cannot pass is logged: their containers then
// start in / and cannot reach their volumes.
func (r *Runner) openWayForPods(runtimeRoot string) error {
	data := filepath.Clean(r.common.DataDir)
	dirs := []string{data}
	if parent := filepath.Join(os.TempDir(), "splitlet"); filepath.Dir(data) == parent {
		dirs = append([]string{parent}, dirs...)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
	}
	for d := filepath.Dir(dirs[0]); ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			r.log.Warn("pods cannot reach their directories: a directory on the way is closed to them (their containers start in / and their volumes are out of reach)",
				zap.String("dir", d), zap.String("under", runtimeRoot))
		}
		if filepath.Dir(d) == d {
			return nil
		}
	}
}
