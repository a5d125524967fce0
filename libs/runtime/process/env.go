package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/containerenv"
)

// containerEnv builds a container's environment: the base environment,
// HOSTNAME, then envFrom and env (package containerenv).
func (r *Runtime) containerEnv(ctx context.Context, pod *corev1.Pod, c *corev1.Container, opts runtime.StartOptions) ([]string, error) {
	return containerenv.Build(ctx, pod, c, containerenv.Options{
		Base: r.opts.baseEnv, Hostname: true, PodIP: r.PodIP(pod), HostIP: r.opts.hostIP, Runtime: Type,
		Sources: opts.Sources, Allocatable: opts.Allocatable, ServiceEnv: opts.ServiceEnv, VolumePaths: opts.VolumePaths,
	})
}

// envValue returns the value of key in env (the last one wins).
func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// lookPath finds the program to run as a shell would, in the PATH of the
// container's environment; a name with a slash is taken relative to dir.
func lookPath(name string, env []string, dir string) (string, error) {
	if name == "" {
		return "", errors.New("exec: empty program name")
	}
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := executable(p); err != nil {
			return "", fmt.Errorf("exec: %q: %w", name, err)
		}
		return p, nil
	}
	for _, d := range filepath.SplitList(envValue(env, "PATH")) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, name)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH", name)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return errors.New("is a directory")
	}
	if fi.Mode()&0o111 == 0 {
		return errors.New("permission denied")
	}
	return nil
}
