package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// The cgroup keys' defaults, the kubelet's.
const (
	DefaultCgroupRoot   = "/"
	DefaultCgroupDriver = "cgroupfs"
)

// Cgroups holds the node's cgroup keys, the kubelet's cgroupsPerQOS,
// cgroupDriver, cgroupRoot, podPidsLimit and enforceNodeAllocatable: how
// the pod workers lay out the pods' cgroups (libs/cgroups), and what
// nodehb's /configz states. Like DNS they are node-wide keys without a
// stage's prefix, shared by the stages of one process (RegisterFlags).
type Cgroups struct {
	// PerQOS is cgroups-per-qos as given (or unset); PerQOSFor resolves
	// it for a runtime.
	PerQOS OptBool
	// Driver is cgroup-driver: cgroupfs or systemd.
	Driver string
	// Root is cgroup-root, in the driver's form.
	Root string
	// PodPidsLimit is pod-pids-limit: each pod cgroup's pids.max; -1 none.
	PodPidsLimit int64
	// EnforceNodeAllocatable is enforce-node-allocatable: pods, or none.
	EnforceNodeAllocatable []string
}

// PerQOSFor is whether the pods' cgroups are laid out on a runtime: as
// given, else on (the kubelet's default) but for the process runtime,
// which puts no process in a cgroup.
func (c *Cgroups) PerQOSFor(runtime string) bool {
	return c.PerQOS.Or(runtime != RuntimeProcess)
}

// OptBool is a boolean key that may be left unset (the zero value), its
// default then decided by what else is set: a Switch written true/false.
type OptBool Switch

// The values of an OptBool.
const (
	Unset = OptBool(SwitchAuto)
	True  = OptBool(SwitchOn)
	False = OptBool(SwitchOff)
)

// Or is the value, def when unset.
func (b OptBool) Or(def bool) bool { return Switch(b).On(def) }

// String is "", "true" or "false".
func (b OptBool) String() string {
	switch b {
	case True:
		return "true"
	case False:
		return "false"
	}
	return ""
}

// EnforcePods says whether kubepods is held to the node's allocatable.
func (c *Cgroups) EnforcePods() bool { return slices.Contains(c.EnforceNodeAllocatable, "pods") }

// RegisterFlags adds cgroups-per-qos, cgroup-driver, cgroup-root,
// pod-pids-limit and enforce-node-allocatable to fs. When another Cgroups
// registered them in fs already (two stages in one process), c shares
// them: one definition, each value set in both.
func (c *Cgroups) RegisterFlags(fs *pflag.FlagSet) {
	if c.share(fs) {
		return
	}
	c.Driver, c.Root, c.PodPidsLimit, c.EnforceNodeAllocatable = DefaultCgroupDriver, DefaultCgroupRoot, -1, []string{"pods"}
	perQOS := fs.VarPF(&sharedValue[OptBool]{targets: []*OptBool{&c.PerQOS}, typ: "bool", parse: parseOptBool}, "cgroups-per-qos", "",
		"lay out the pods' cgroups as the kubelet does (its --cgroups-per-qos): a kubepods cgroup under cgroup-root, burstable and besteffort cgroups under it and a pod<uid> cgroup per pod with the pod's CPU shares, CFS quota, memory and pids limits, the parent of the pod's sandbox (runtime cri); default true, but for runtime process, which puts no process in a cgroup and refuses true; runtime sim writes none and logs the layout")
	perQOS.NoOptDefVal = "true"
	fs.Var(&sharedValue[string]{targets: []*string{&c.Driver}, typ: "string", parse: parseDriver}, "cgroup-driver",
		"how cgroups are named (the kubelet's --cgroup-driver): cgroupfs (/kubepods/burstable/pod<uid>) or systemd (kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice); it must match the CRI runtime's (containerd's runc SystemdCgroup)")
	fs.Var(&sharedValue[string]{targets: []*string{&c.Root}, typ: "string", parse: nonEmpty}, "cgroup-root",
		"the cgroup kubepods is made under (the kubelet's --cgroup-root), in the driver's form: a path for cgroupfs, a slice for systemd")
	fs.Var(&sharedValue[int64]{targets: []*int64{&c.PodPidsLimit}, typ: "int64", parse: parsePids}, "pod-pids-limit",
		"the most processes of one pod (the kubelet's --pod-max-pids): each pod cgroup's pids.max; -1: no limit")
	fs.Var(&sharedValue[[]string]{targets: []*[]string{&c.EnforceNodeAllocatable}, typ: "strings", parse: parseEnforce}, "enforce-node-allocatable",
		"what is held to the node's allocatable (the kubelet's --enforce-node-allocatable): pods (kubepods gets the node's allocatable CPU as shares and memory as its limit) or none; kube-reserved and system-reserved, whose cgroups Splitlet does not manage, are refused")
}

// share makes c take the cgroup keys already in fs, if they are, and
// their values from then on.
func (c *Cgroups) share(fs *pflag.FlagSet) bool {
	perQOS, ok1 := lookupShared[OptBool](fs, "cgroups-per-qos")
	driver, ok2 := lookupShared[string](fs, "cgroup-driver")
	root, ok3 := lookupShared[string](fs, "cgroup-root")
	pids, ok4 := lookupShared[int64](fs, "pod-pids-limit")
	enforce, ok5 := lookupShared[[]string](fs, "enforce-node-allocatable")
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return false
	}
	perQOS.add(&c.PerQOS)
	driver.add(&c.Driver)
	root.add(&c.Root)
	pids.add(&c.PodPidsLimit)
	enforce.add(&c.EnforceNodeAllocatable)
	return true
}

// Validate checks the values (each was checked as it was set; this
// checks what a zero Cgroups holds).
func (c *Cgroups) Validate() error {
	if _, err := parseDriver(c.Driver); err != nil {
		return fmt.Errorf("invalid value %q for cgroup-driver: %w", c.Driver, err)
	}
	if c.Root == "" {
		return fmt.Errorf("invalid value for cgroup-root: empty")
	}
	return nil
}

// sharedValue is a key that sets every stage's copy of it.
type sharedValue[T any] struct {
	targets []*T
	typ     string
	parse   func(string) (T, error)
}

func (s *sharedValue[T]) Type() string { return s.typ }

func (s *sharedValue[T]) String() string {
	if len(s.targets) == 0 {
		return ""
	}
	switch v := any(*s.targets[0]).(type) {
	case []string:
		return strings.Join(v, ",")
	default:
		return fmt.Sprint(v)
	}
}

// Set parses v and sets it in every target.
func (s *sharedValue[T]) Set(v string) error {
	parsed, err := s.parse(v)
	if err != nil {
		return err
	}
	for _, t := range s.targets {
		*t = parsed
	}
	return nil
}

// add makes t one more target, with the value the others have.
func (s *sharedValue[T]) add(t *T) {
	*t = *s.targets[0]
	s.targets = append(s.targets, t)
}

func lookupShared[T any](fs *pflag.FlagSet, name string) (*sharedValue[T], bool) {
	f := fs.Lookup(name)
	if f == nil {
		return nil, false
	}
	v, ok := f.Value.(*sharedValue[T])
	return v, ok
}

func parseOptBool(v string) (OptBool, error) {
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		return Unset, fmt.Errorf("%q is not a boolean", v)
	}
	if b {
		return True, nil
	}
	return False, nil
}

func parseDriver(v string) (string, error) {
	switch v = strings.TrimSpace(v); v {
	case "cgroupfs", "systemd":
		return v, nil
	}
	return "", fmt.Errorf("%q: want cgroupfs or systemd", v)
}

func nonEmpty(v string) (string, error) {
	if v = strings.TrimSpace(v); v == "" {
		return "", fmt.Errorf("empty")
	}
	return v, nil
}

func parsePids(v string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < -1 || n == 0 {
		return 0, fmt.Errorf("%q: want a positive number of processes, or -1 for no limit", v)
	}
	return n, nil
}

// parseEnforce reads enforce-node-allocatable: pods, or none (or empty).
func parseEnforce(v string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(v, ",") {
		switch p = strings.TrimSpace(strings.Trim(strings.TrimSpace(p), "[]")); p {
		case "", "none":
		case "pods":
			out = append(out, p)
		case "system-reserved", "kube-reserved", "system-reserved-compressible", "kube-reserved-compressible":
			return nil, fmt.Errorf("%q: Splitlet manages no cgroup of the system's or Kubernetes' daemons; want pods or none", p)
		default:
			return nil, fmt.Errorf("%q: want pods or none", p)
		}
	}
	return out, nil
}
