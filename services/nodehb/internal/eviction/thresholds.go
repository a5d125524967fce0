// Package eviction is the node's eviction manager, as the kubelet's: it
// observes the node's signals (memory.available, nodefs.*, imagefs.*,
// pid.available), compares them with the hard and soft thresholds, reports
// the pressure conditions, and picks the pod to evict when a threshold has
// been met for its grace period. The decisions here are pure (thresholds,
// ranking, messages); Loop (loop.go) drives them against the host, the pod
// workers' figures and the bus.
package eviction

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Signal is an eviction signal, as the kubelet names it.
type Signal string

// The signals the eviction manager observes.
const (
	MemoryAvailable   Signal = "memory.available"
	NodeFsAvailable   Signal = "nodefs.available"
	NodeFsInodesFree  Signal = "nodefs.inodesFree"
	ImageFsAvailable  Signal = "imagefs.available"
	ImageFsInodesFree Signal = "imagefs.inodesFree"
	PIDAvailable      Signal = "pid.available"
)

// ResourceInodes and ResourcePIDs are the kubelet's names of the resources
// behind the inode and PID signals (they are no resources of the API).
const (
	ResourceInodes corev1.ResourceName = "inodes"
	ResourcePIDs   corev1.ResourceName = "pids"
)

// signalInfo: the resource a signal measures, the node condition it sets,
// and the order in which starved resources are reclaimed (memory first).
var signalInfo = map[Signal]struct {
	resource  corev1.ResourceName
	condition corev1.NodeConditionType
	order     int
}{
	MemoryAvailable:   {corev1.ResourceMemory, corev1.NodeMemoryPressure, 0},
	NodeFsAvailable:   {corev1.ResourceEphemeralStorage, corev1.NodeDiskPressure, 1},
	NodeFsInodesFree:  {ResourceInodes, corev1.NodeDiskPressure, 1},
	ImageFsAvailable:  {corev1.ResourceEphemeralStorage, corev1.NodeDiskPressure, 1},
	ImageFsInodesFree: {ResourceInodes, corev1.NodeDiskPressure, 1},
	PIDAvailable:      {ResourcePIDs, corev1.NodePIDPressure, 2},
}

// Resource is the resource the signal measures.
func (s Signal) Resource() corev1.ResourceName { return signalInfo[s].resource }

// Condition is the node condition the signal sets.
func (s Signal) Condition() corev1.NodeConditionType { return signalInfo[s].condition }

// Value is a threshold's amount: a quantity, or a percentage of capacity.
type Value struct {
	Quantity   *resource.Quantity
	Percentage float64 // 0 < p <= 1 when Quantity is nil
}

// Of is the amount for a signal whose capacity is capacity (kubelet:
// GetThresholdQuantity).
func (v Value) Of(capacity int64, format resource.Format) *resource.Quantity {
	if v.Quantity != nil {
		q := v.Quantity.DeepCopy()
		return &q
	}
	return resource.NewQuantity(int64(float64(capacity)*v.Percentage), format)
}

// String is the value as it was written.
func (v Value) String() string {
	if v.Quantity != nil {
		return v.Quantity.String()
	}
	return strconv.FormatFloat(v.Percentage*100, 'f', -1, 64) + "%"
}

// Threshold is one eviction threshold: signal<value. A soft one has a
// grace period; MinReclaim (optional) is how far past the threshold
// reclaim goes before the threshold counts as resolved.
type Threshold struct {
	Signal      Signal
	Value       Value
	GracePeriod time.Duration
	MinReclaim  *Value
	Hard        bool
}

func (t Threshold) key() string {
	return fmt.Sprintf("%s<%s/%v/%v", t.Signal, t.Value, t.Hard, t.GracePeriod)
}

// DefaultHard is the kubelet's default --eviction-hard (Linux).
const DefaultHard = "memory.available<100Mi,nodefs.available<10%,imagefs.available<15%,nodefs.inodesFree<5%,imagefs.inodesFree<5%"

// Parse reads the thresholds: hard and soft as "signal<value[,...]",
// soft grace periods as signal=duration, minimum reclaims as signal=value
// (kubelet: ParseThresholdConfig). A soft threshold needs a grace period;
// a threshold of 0 is no threshold.
func Parse(hard, soft string, softGrace, minReclaim map[string]string) ([]Threshold, error) {
	hs, err := parseStatements(hard)
	if err != nil {
		return nil, fmt.Errorf("eviction-hard: %w", err)
	}
	ss, err := parseStatements(soft)
	if err != nil {
		return nil, fmt.Errorf("eviction-soft: %w", err)
	}
	graces := map[Signal]time.Duration{}
	for k, v := range softGrace {
		s, err := knownSignal(k)
		if err != nil {
			return nil, fmt.Errorf("eviction-soft-grace-period: %w", err)
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("eviction-soft-grace-period: %s: %q is not a duration of 0 or more", k, v)
		}
		graces[s] = d
	}
	reclaims := map[Signal]Value{}
	for k, v := range minReclaim {
		s, err := knownSignal(k)
		if err != nil {
			return nil, fmt.Errorf("eviction-minimum-reclaim: %w", err)
		}
		val, err := parseValue(v)
		if err != nil {
			return nil, fmt.Errorf("eviction-minimum-reclaim: %s: %w", k, err)
		}
		reclaims[s] = val
	}
	var out []Threshold
	for _, t := range hs {
		t.Hard = true
		out = append(out, t)
	}
	for _, t := range ss {
		g, ok := graces[t.Signal]
		if !ok {
			return nil, fmt.Errorf("eviction-soft: %s: no grace period in eviction-soft-grace-period", t.Signal)
		}
		t.GracePeriod = g
		out = append(out, t)
	}
	for i := range out {
		if r, ok := reclaims[out[i].Signal]; ok {
			r := r
			out[i].MinReclaim = &r
		}
	}
	return out, nil
}

func knownSignal(s string) (Signal, error) {
	if _, ok := signalInfo[Signal(s)]; !ok {
		known := make([]string, 0, len(signalInfo))
		for k := range signalInfo {
			known = append(known, string(k))
		}
		sort.Strings(known)
		return "", fmt.Errorf("unknown signal %q (one of %s)", s, strings.Join(known, ", "))
	}
	return Signal(s), nil
}

// parseStatements reads "signal<value[,...]"; a signal given twice is an error.
func parseStatements(list string) ([]Threshold, error) {
	var out []Threshold
	seen := map[Signal]bool{}
	for _, st := range strings.Split(list, ",") {
		st = strings.TrimSpace(st)
		if st == "" {
			continue
		}
		sig, val, ok := strings.Cut(st, "<")
		if !ok {
			return nil, fmt.Errorf("%q: want signal<quantity or signal<percent%%", st)
		}
		s, err := knownSignal(strings.TrimSpace(sig))
		if err != nil {
			return nil, err
		}
		if seen[s] {
			return nil, fmt.Errorf("%s given twice", s)
		}
		seen[s] = true
		v, err := parseValue(strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("%q: %w", st, err)
		}
		if (v.Quantity != nil && v.Quantity.IsZero()) || (v.Quantity == nil && v.Percentage == 0) {
			continue // kubelet: a threshold of 0 is none
		}
		out = append(out, Threshold{Signal: s, Value: v})
	}
	return out, nil
}

func parseValue(v string) (Value, error) {
	if p, ok := strings.CutSuffix(v, "%"); ok {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil || f < 0 || f > 100 {
			return Value{}, fmt.Errorf("percentage %q must be 0%% to 100%%", v)
		}
		return Value{Percentage: f / 100}, nil
	}
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return Value{}, fmt.Errorf("quantity %q: %w", v, err)
	}
	if q.Sign() < 0 {
		return Value{}, fmt.Errorf("quantity %q must not be negative", v)
	}
	return Value{Quantity: &q}, nil
}

// FormatThresholds writes thresholds back as signal<value, for /configz.
func FormatThresholds(ts []Threshold, hard bool) map[string]string {
	out := map[string]string{}
	for _, t := range ts {
		if t.Hard == hard {
			out[string(t.Signal)] = t.Value.String()
		}
	}
	return out
}
