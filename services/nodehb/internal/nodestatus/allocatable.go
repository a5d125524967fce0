package nodestatus

import (
	"github.com/splitlet/splitlet/services/nodehb/internal/eviction"

	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// DefaultEvictionHard is the kubelet's default --eviction-hard.
const DefaultEvictionHard = eviction.DefaultHard

// evictionResources maps the eviction signals that reserve part of a
// resource from allocatable to that resource (kubelet: the hard thresholds
// of memory.available and nodefs.available).
var evictionResources = map[string]corev1.ResourceName{
	"memory.available":   corev1.ResourceMemory,
	"nodefs.available":   corev1.ResourceEphemeralStorage,
	"imagefs.available":  "",
	"nodefs.inodesFree":  "",
	"imagefs.inodesFree": "",
	"pid.available":      "",
}

// Allocatable is capacity less the reservations (kube-reserved,
// system-reserved) and the hard eviction thresholds of memory and the
// node's file system, never below zero (kubelet: the node allocatable
// reservation). evictionHard is "signal<quantity|percent%[,...]".
func Allocatable(capacity corev1.ResourceList, evictionHard string, reserved ...corev1.ResourceList) (corev1.ResourceList, error) {
	out := capacity.DeepCopy()
	for _, r := range reserved {
		for name, q := range r {
			if c, ok := out[name]; ok {
				c.Sub(q)
				out[name] = c
			}
		}
	}
	for _, t := range strings.Split(evictionHard, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		signal, value, ok := strings.Cut(t, "<")
		if !ok {
			return nil, fmt.Errorf("eviction threshold %q: want signal<quantity or signal<percent%%", t)
		}
		name, known := evictionResources[signal]
		if !known {
			return nil, fmt.Errorf("eviction threshold %q: unknown signal %q", t, signal)
		}
		var q resource.Quantity
		if pct, isPct := strings.CutSuffix(value, "%"); isPct {
			var f float64
			if _, err := fmt.Sscanf(pct, "%g", &f); err != nil || f < 0 || f > 100 {
				return nil, fmt.Errorf("eviction threshold %q: bad percentage", t)
			}
			c := capacity[name]
			q = *resource.NewQuantity(int64(float64(c.Value())*f/100), resource.BinarySI)
		} else {
			var err error
			if q, err = resource.ParseQuantity(value); err != nil {
				return nil, fmt.Errorf("eviction threshold %q: %w", t, err)
			}
		}
		if c, ok := out[name]; ok && name != "" {
			c.Sub(q)
			out[name] = c
		}
	}
	for name, q := range out {
		if q.Sign() < 0 {
			out[name] = *resource.NewQuantity(0, q.Format)
		}
	}
	return out, nil
}
