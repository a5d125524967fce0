package nodestatus

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Well-known labels the kubelet sets on its Node.
const (
	LabelHostname = "kubernetes.io/hostname"
	LabelOS       = "kubernetes.io/os"
	LabelArch     = "kubernetes.io/arch"
)

// Desired is what this agent says about its Node: the parts it owns.
type Desired struct {
	Name        string
	Labels      map[string]string
	Taints      []corev1.Taint
	Capacity    corev1.ResourceList
	Allocatable corev1.ResourceList
	Addresses   []corev1.NodeAddress
	Port        int32
	NodeInfo    corev1.NodeSystemInfo
}

// ParseLabels checks configured labels as the API server would, naming the
// offending key in the error.
func ParseLabels(key string, in map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(in))
	keys := make([]string, 0, len(in))
	for k := range in {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := in[k]
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("invalid value for %s: label key %q: %s", key, k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, fmt.Errorf("invalid value for %s: label %q value %q: %s", key, k, v, strings.Join(errs, "; "))
		}
		out[k] = v
	}
	return out, nil
}

// ParseTaints reads taints written as the kubelet's --register-with-taints
// takes them: key[=value]:Effect.
func ParseTaints(key string, in []string) ([]corev1.Taint, error) {
	var out []corev1.Taint
	seen := map[string]bool{}
	for _, s := range in {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		kv, effect, ok := strings.Cut(s, ":")
		if !ok {
			return nil, fmt.Errorf("invalid value for %s: taint %q: want key[=value]:Effect", key, s)
		}
		k, v, _ := strings.Cut(kv, "=")
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("invalid value for %s: taint %q key: %s", key, s, strings.Join(errs, "; "))
		}
		if v != "" {
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
				return nil, fmt.Errorf("invalid value for %s: taint %q value: %s", key, s, strings.Join(errs, "; "))
			}
		}
		e := corev1.TaintEffect(effect)
		switch e {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			return nil, fmt.Errorf("invalid value for %s: taint %q effect %q: want NoSchedule, PreferNoSchedule or NoExecute", key, s, effect)
		}
		id := k + ":" + effect
		if seen[id] {
			return nil, fmt.Errorf("invalid value for %s: taint %q given twice", key, id)
		}
		seen[id] = true
		out = append(out, corev1.Taint{Key: k, Value: v, Effect: e})
	}
	return out, nil
}

// ParseQuantity reads a resource figure, naming the key on error. Negative
// figures are refused.
func ParseQuantity(key, s string) (resource.Quantity, error) {
	q, err := resource.ParseQuantity(strings.TrimSpace(s))
	if err != nil {
		return resource.Quantity{}, fmt.Errorf("invalid value %q for %s: %v", s, key, err)
	}
	if q.Sign() < 0 {
		return resource.Quantity{}, fmt.Errorf("invalid value %q for %s: negative", s, key)
	}
	return q, nil
}

// NewNode builds the Node object the agent registers (kubelet: initialNode).
func (d *Desired) NewNode() *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   d.Name,
			Labels: map[string]string{},
			// kubelet: registers with controller-managed attach/detach on.
			Annotations: map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
		},
	}
	for k, v := range d.Labels {
		n.Labels[k] = v
	}
	n.Spec.Taints = append([]corev1.Taint(nil), d.Taints...)
	return n
}

// ReconcileExisting brings an existing Node (adopted at registration) in line
// with the configured labels. It reports whether it changed n. Taints are
// left as they are: like the kubelet's --register-with-taints they apply at
// registration only (NodeRestriction refuses a node that changes its own).
func (d *Desired) ReconcileExisting(n *corev1.Node) bool {
	changed := false
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	for k, v := range d.Labels {
		if cur, ok := n.Labels[k]; !ok || cur != v {
			n.Labels[k] = v
			changed = true
		}
	}
	return changed
}
