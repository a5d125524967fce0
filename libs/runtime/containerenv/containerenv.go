// Package containerenv builds a container's environment from its spec the
// way the kubelet does (GenerateRunContainerOptions' env part): envFrom, then
// env in order, later entries winning, $(VAR) references expanded against
// what is defined before them, and the downward API. ConfigMaps and Secrets
// are read through Options.Sources; without it a reference to one is an
// error unless it is optional.
package containerenv

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/runtime"
)

// Options are what the environment depends on besides the spec.
type Options struct {
	// Base is the environment the container starts from, as "KEY=value".
	Base []string
	// Hostname sets HOSTNAME to the pod's hostname (a CRI runtime sets it
	// itself).
	Hostname bool
	// PodIP and HostIP are status.podIP(s) and status.hostIP(s).
	PodIP, HostIP string
	// Runtime names the runtime in errors ("process").
	Runtime string
	// Sources reads ConfigMaps and Secrets; nil reads none.
	Sources runtime.Sources
	// Allocatable is the node's, for resourceFieldRef without a limit.
	Allocatable corev1.ResourceList
	// ServiceEnv are the service variables ("KEY=value"; ServiceVariables).
	ServiceEnv []string
	// VolumePaths are the host paths of the pod's volumes, by name, where
	// fileKeyRef reads its env files.
	VolumePaths map[string]string
}

// ServiceVariables are the environment variables of services the kubelet
// gives a container (docker links style): for each service with a cluster
// IP, NAME_SERVICE_HOST, NAME_SERVICE_PORT, NAME_SERVICE_PORT_<PORT NAME>,
// NAME_PORT, and NAME_PORT_<port>_<PROTO>[_PROTO|_PORT|_ADDR], NAME being
// the service's name upper-cased with '-' as '_'.
func ServiceVariables(services []*corev1.Service) []string {
	var out []string
	for _, svc := range services {
		ip := svc.Spec.ClusterIP
		if ip == "" || ip == corev1.ClusterIPNone || len(svc.Spec.Ports) == 0 {
			continue
		}
		name := strings.ToUpper(strings.ReplaceAll(svc.Name, "-", "_"))
		out = append(out, name+"_SERVICE_HOST="+ip, name+"_SERVICE_PORT="+strconv.Itoa(int(svc.Spec.Ports[0].Port)))
		for _, p := range svc.Spec.Ports {
			if p.Name != "" {
				out = append(out, name+"_SERVICE_PORT_"+strings.ToUpper(strings.ReplaceAll(p.Name, "-", "_"))+"="+strconv.Itoa(int(p.Port)))
			}
		}
		for i, p := range svc.Spec.Ports {
			proto := string(p.Protocol)
			if proto == "" {
				proto = string(corev1.ProtocolTCP)
			}
			port := strconv.Itoa(int(p.Port))
			url := strings.ToLower(proto) + "://" + net.JoinHostPort(ip, port)
			prefix := name + "_PORT_" + port + "_" + strings.ToUpper(proto)
			if i == 0 {
				out = append(out, name+"_PORT="+url)
			}
			out = append(out, prefix+"="+url, prefix+"_PROTO="+strings.ToLower(proto), prefix+"_PORT="+port, prefix+"_ADDR="+ip)
		}
	}
	return out
}

// Build returns the container's environment as "KEY=value", in order.
func Build(ctx context.Context, pod *corev1.Pod, c *corev1.Container, o Options) ([]string, error) {
	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	for _, kv := range o.Base {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			set(k, v)
		}
	}
	if o.Hostname {
		// kubelet: a container's hostname is the pod's (spec.hostname or name).
		host := pod.Spec.Hostname
		if host == "" {
			host = pod.Name
		}
		set("HOSTNAME", host)
	}
	for _, src := range c.EnvFrom {
		data, err := envFromData(ctx, pod.Namespace, src, o)
		if err != nil {
			return nil, err
		}
		for _, k := range sortedKeys(data) {
			set(src.Prefix+k, data[k])
		}
	}
	services := map[string]string{}
	for _, kv := range o.ServiceEnv {
		if k, v, ok := strings.Cut(kv, "="); ok {
			services[k] = v
		}
	}
	// kubelet: $(VAR) sees the service variables too.
	lookup := func(name string) (string, bool) {
		if v, ok := vars[name]; ok {
			return v, ok
		}
		v, ok := services[name]
		return v, ok
	}
	for _, e := range c.Env {
		if e.Name == "" {
			return nil, errors.New("env: a variable has no name")
		}
		if e.ValueFrom == nil {
			set(e.Name, kube.Expand(e.Value, lookup))
			continue
		}
		v, skip, err := valueFrom(ctx, pod, c, e.ValueFrom, o)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if !skip {
			set(e.Name, v)
		}
	}
	// kubelet: the service variables come last, each unless the container
	// defines it itself.
	for _, kv := range o.ServiceEnv {
		if k, v, ok := strings.Cut(kv, "="); ok {
			if _, defined := vars[k]; !defined {
				set(k, v)
			}
		}
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+vars[k])
	}
	return env, nil
}

// Expand expands $(VAR) references in command or args against env
// ("KEY=value", the last one wins), as the kubelet does.
func Expand(args []string, env []string) []string {
	vars := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	lookup := func(name string) (string, bool) { v, ok := vars[name]; return v, ok }
	if args == nil {
		return nil
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = kube.Expand(a, lookup)
	}
	return out
}

// valueFrom resolves an env var source: the downward API, resource fields
// of the container's requests and limits, keys of ConfigMaps and Secrets,
// and keys of env files in the pod's volumes.
func valueFrom(ctx context.Context, pod *corev1.Pod, c *corev1.Container, src *corev1.EnvVarSource, o Options) (string, bool, error) {
	switch {
	case src.FieldRef != nil:
		v, err := fieldValue(pod, src.FieldRef.FieldPath, o)
		return v, false, err
	case src.ResourceFieldRef != nil:
		v, err := resourceValue(c, src.ResourceFieldRef, o)
		return v, false, err
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		return keyValue(ctx, o, false, pod.Namespace, ref.Name, ref.Key, ref.Optional)
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		return keyValue(ctx, o, true, pod.Namespace, ref.Name, ref.Key, ref.Optional)
	case src.FileKeyRef != nil:
		return fileKeyValue(src.FileKeyRef, o)
	}
	return "", false, errors.New("valueFrom names no source")
}

// envFromData reads what one envFrom entry brings, keys without the prefix;
// an optional source that does not exist brings nothing.
func envFromData(ctx context.Context, ns string, src corev1.EnvFromSource, o Options) (map[string]string, error) {
	switch {
	case src.ConfigMapRef != nil:
		data, _, err := sourceData(ctx, o, false, ns, src.ConfigMapRef.Name, src.ConfigMapRef.Optional)
		return data, err
	case src.SecretRef != nil:
		data, _, err := sourceData(ctx, o, true, ns, src.SecretRef.Name, src.SecretRef.Optional)
		return data, err
	}
	return nil, errors.New("envFrom names no source")
}

// sourceData reads a ConfigMap's or a Secret's data; skip is true for an
// optional one that is not there (or cannot be read, without Sources).
func sourceData(ctx context.Context, o Options, secret bool, ns, name string, optional *bool) (data map[string]string, skip bool, err error) {
	opt := optional != nil && *optional
	kind := "ConfigMaps"
	if secret {
		kind = "Secrets"
	}
	if o.Sources == nil {
		if opt {
			return nil, true, nil
		}
		return nil, false, fmt.Errorf("the %s runtime cannot read %s", o.Runtime, kind)
	}
	if secret {
		var sec *corev1.Secret
		if sec, err = o.Sources.Secret(ctx, ns, name); err == nil {
			data = make(map[string]string, len(sec.Data))
			for k, v := range sec.Data {
				data[k] = string(v)
			}
		}
	} else {
		var cm *corev1.ConfigMap
		if cm, err = o.Sources.ConfigMap(ctx, ns, name); err == nil {
			data = cm.Data
		}
	}
	if err != nil {
		if opt && apierrors.IsNotFound(err) {
			return nil, true, nil
		}
		return nil, false, err
	}
	return data, false, nil
}

// keyValue is one key of a ConfigMap or Secret (valueFrom), with the
// kubelet's message for a key that is not there.
func keyValue(ctx context.Context, o Options, secret bool, ns, name, key string, optional *bool) (string, bool, error) {
	data, skip, err := sourceData(ctx, o, secret, ns, name, optional)
	if err != nil || skip {
		return "", skip, err
	}
	v, ok := data[key]
	if !ok {
		if optional != nil && *optional {
			return "", true, nil
		}
		kind := "ConfigMap"
		if secret {
			kind = "Secret"
		}
		return "", false, fmt.Errorf("couldn't find key %v in %s %v/%v", key, kind, ns, name)
	}
	return v, false, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// MetadataField is a downward API field of the pod's metadata: its name,
// namespace, UID, one label or annotation (metadata.labels['k']), or all of
// them (in volumes), as the kubelet writes them: sorted key="value" lines,
// values quoted as Go quotes them. ok is false for another path.
func MetadataField(pod *corev1.Pod, path string) (v string, ok bool) {
	if k, ok := subscript(path, "metadata.labels"); ok {
		return pod.Labels[k], true
	}
	if k, ok := subscript(path, "metadata.annotations"); ok {
		return pod.Annotations[k], true
	}
	switch path {
	case "metadata.name":
		return pod.Name, true
	case "metadata.namespace":
		return pod.Namespace, true
	case "metadata.uid":
		return string(pod.UID), true
	case "metadata.labels":
		return formatMap(pod.Labels), true
	case "metadata.annotations":
		return formatMap(pod.Annotations), true
	}
	return "", false
}

func formatMap(m map[string]string) string {
	var b strings.Builder
	for i, k := range sortedKeys(m) {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.Quote(m[k]))
	}
	return b.String()
}

func fieldValue(pod *corev1.Pod, path string, o Options) (string, error) {
	if v, ok := MetadataField(pod, path); ok {
		return v, nil
	}
	switch path {
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		return o.PodIP, nil
	case "status.hostIP", "status.hostIPs":
		return o.HostIP, nil
	}
	return "", fmt.Errorf("fieldRef %q is not supported by the %s runtime", path, o.Runtime)
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
// divided by the divisor, rounded up; a limit the container does not set is
// the node's allocatable (kubelet: limits default to allocatable).
func resourceValue(c *corev1.Container, ref *corev1.ResourceFieldSelector, o Options) (string, error) {
	return ResourceValue(c, ref, o.Allocatable, o.Runtime)
}

// ResourceValue is the value of a resourceFieldRef of container c (the
// downward API, in env and in volumes), with the node's allocatable as the
// default of an unset limit.
func ResourceValue(c *corev1.Container, ref *corev1.ResourceFieldSelector, allocatable corev1.ResourceList, rtName string) (string, error) {
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok || (kind != "limits" && kind != "requests") {
		return "", fmt.Errorf("resourceFieldRef %q: unknown resource", ref.Resource)
	}
	list := c.Resources.Limits
	if kind == "requests" {
		list = c.Resources.Requests
	}
	q, ok := list[corev1.ResourceName(name)]
	if !ok && kind == "limits" {
		q, ok = allocatable[corev1.ResourceName(name)]
	}
	if !ok && kind == "requests" {
		// kubelet: an unset request reads as zero.
		q, ok = resource.Quantity{}, true
	}
	if !ok {
		return "", fmt.Errorf("resourceFieldRef %q: the container sets no value and the %s runtime does not know the node's allocatable", ref.Resource, rtName)
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
