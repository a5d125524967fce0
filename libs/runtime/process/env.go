package process

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/splitlet/splitlet/libs/kube"
)

// containerEnv builds a container's environment: the base environment,
// HOSTNAME, then envFrom and env in order, later entries winning, with
// $(VAR) references expanded against what is defined before them.
func (r *Runtime) containerEnv(pod *corev1.Pod, c *corev1.Container) ([]string, error) {
	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	for _, kv := range r.opts.baseEnv {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			set(k, v)
		}
	}
	// kubelet: a container's hostname is the pod's (spec.hostname or name).
	host := pod.Spec.Hostname
	if host == "" {
		host = pod.Name
	}
	set("HOSTNAME", host)
	for _, src := range c.EnvFrom {
		switch {
		case src.ConfigMapRef != nil && src.ConfigMapRef.Optional != nil && *src.ConfigMapRef.Optional,
			src.SecretRef != nil && src.SecretRef.Optional != nil && *src.SecretRef.Optional:
			// Optional: the runtime sees no ConfigMap or Secret, as if absent.
		default:
			return nil, errors.New("envFrom: the process runtime cannot read ConfigMaps or Secrets")
		}
	}
	lookup := func(name string) (string, bool) { v, ok := vars[name]; return v, ok }
	for _, e := range c.Env {
		if e.Name == "" {
			return nil, errors.New("env: a variable has no name")
		}
		if e.ValueFrom == nil {
			set(e.Name, kube.Expand(e.Value, lookup))
			continue
		}
		v, skip, err := r.valueFrom(pod, c, e.ValueFrom)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if !skip {
			set(e.Name, v)
		}
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+vars[k])
	}
	return env, nil
}

// valueFrom resolves an env var source: the downward API fields that make
// sense for a local process and resource fields of the container's own
// requests and limits.
func (r *Runtime) valueFrom(pod *corev1.Pod, c *corev1.Container, src *corev1.EnvVarSource) (string, bool, error) {
	switch {
	case src.FieldRef != nil:
		v, err := r.fieldValue(pod, src.FieldRef.FieldPath)
		return v, false, err
	case src.ResourceFieldRef != nil:
		v, err := resourceValue(c, src.ResourceFieldRef)
		return v, false, err
	case src.ConfigMapKeyRef != nil:
		if src.ConfigMapKeyRef.Optional != nil && *src.ConfigMapKeyRef.Optional {
			return "", true, nil
		}
		return "", false, errors.New("configMapKeyRef: the process runtime cannot read ConfigMaps")
	case src.SecretKeyRef != nil:
		if src.SecretKeyRef.Optional != nil && *src.SecretKeyRef.Optional {
			return "", true, nil
		}
		return "", false, errors.New("secretKeyRef: the process runtime cannot read Secrets")
	}
	return "", false, errors.New("valueFrom names no source")
}

func (r *Runtime) fieldValue(pod *corev1.Pod, path string) (string, error) {
	if k, ok := subscript(path, "metadata.labels"); ok {
		return pod.Labels[k], nil
	}
	if k, ok := subscript(path, "metadata.annotations"); ok {
		return pod.Annotations[k], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		return r.PodIP(pod), nil
	case "status.hostIP", "status.hostIPs":
		return r.opts.hostIP, nil
	}
	return "", fmt.Errorf("fieldRef %q is not supported by the process runtime", path)
}

// subscript parses `prefix['key']`.
func subscript(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "']")
}

// resourceValue follows the kubelet's rule for resourceFieldRef: the value
// divided by the divisor, rounded up; it needs the container's own value
// (the kubelet falls back to the node's allocatable, which this runtime
// does not know).
func resourceValue(c *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok || (kind != "limits" && kind != "requests") {
		return "", fmt.Errorf("resourceFieldRef %q: unknown resource", ref.Resource)
	}
	if ref.ContainerName != "" && ref.ContainerName != c.Name {
		return "", fmt.Errorf("resourceFieldRef %q: another container's resources are not supported by the process runtime", ref.Resource)
	}
	list := c.Resources.Limits
	if kind == "requests" {
		list = c.Resources.Requests
	}
	q, ok := list[corev1.ResourceName(name)]
	if !ok {
		return "", fmt.Errorf("resourceFieldRef %q: the container sets no value and the process runtime does not know the node's allocatable", ref.Resource)
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if name == string(corev1.ResourceCPU) {
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10), nil
	}
	return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
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
