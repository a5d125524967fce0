// Package cgroups lays out the node's cgroups as the kubelet does with
// cgroupsPerQOS: a kubepods cgroup under the cgroup root, burstable and
// besteffort cgroups under it, and a pod<uid> cgroup per pod (a
// Guaranteed pod's directly under kubepods), for the cgroupfs and systemd
// drivers, on cgroup v1 and v2. It computes the values (resources.go) and
// writes them with plain file writes (fs.go).
package cgroups

import (
	"fmt"
	"path"
	"strings"
)

// Driver is how cgroups are named: the kubelet's cgroupDriver.
type Driver string

// The drivers.
const (
	DriverCgroupfs Driver = "cgroupfs"
	DriverSystemd  Driver = "systemd"
)

// The names of the kubelet's cgroups.
const (
	KubepodsName   = "kubepods"
	BurstableName  = "burstable"
	BestEffortName = "besteffort"
	podPrefix      = "pod"
	systemdSuffix  = ".slice"
)

// Name is a cgroup as its components, independent of the driver (the
// kubelet's CgroupName): {"kubepods", "burstable", "pod<uid>"}.
type Name []string

// Child is n with one more component.
func (n Name) Child(part string) Name {
	out := make(Name, len(n), len(n)+1)
	copy(out, n)
	return append(out, part)
}

// Path is the cgroup's path below the root of a hierarchy as the driver
// names it: /kubepods/burstable/pod<uid> (cgroupfs), or
// /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid
// with '_' for '-'>.slice (systemd, each slice nested in its parent's).
func (n Name) Path(d Driver) string {
	if len(n) == 0 {
		return "/"
	}
	if d != DriverSystemd {
		return "/" + path.Join(n...)
	}
	// systemd: a slice's name is its ancestors' names joined by '-', so a
	// '-' inside a component is written '_'.
	var out strings.Builder
	for i := range n {
		parts := make([]string, i+1)
		for j := range parts {
			parts[j] = strings.ReplaceAll(n[j], "-", "_")
		}
		out.WriteString("/" + strings.Join(parts, "-") + systemdSuffix)
	}
	return out.String()
}

// ParseRoot reads the cgroup-root key in the driver's form: a cgroupfs
// path (/, /a/b), or for systemd / or a slice (a-b.slice, or its expanded
// path /a.slice/a-b.slice).
func ParseRoot(root string, d Driver) (Name, error) {
	if root == "" || root == "/" {
		return Name{}, nil
	}
	if d != DriverSystemd {
		if !strings.HasPrefix(root, "/") {
			return nil, fmt.Errorf("cgroup root %q is not an absolute path", root)
		}
		clean := strings.Trim(path.Clean(root), "/")
		if clean == "" {
			return Name{}, nil
		}
		return Name(strings.Split(clean, "/")), nil
	}
	leaf := path.Base(root)
	if !strings.HasSuffix(leaf, systemdSuffix) || leaf == systemdSuffix {
		return nil, fmt.Errorf("cgroup root %q is not a systemd slice (name.slice) for the systemd driver", root)
	}
	var out Name
	for _, part := range strings.Split(strings.TrimSuffix(leaf, systemdSuffix), "-") {
		if part == "" {
			return nil, fmt.Errorf("cgroup root %q: empty component", root)
		}
		out = append(out, strings.ReplaceAll(part, "_", "-"))
	}
	return out, nil
}

// podPart is the last component of a pod's cgroup.
func podPart(uid string) string { return podPrefix + uid }

// podUID reads a pod's UID from the base name of its cgroup's directory
// ("" for another cgroup).
func podUID(base string, d Driver) string {
	if d == DriverSystemd {
		if !strings.HasSuffix(base, systemdSuffix) {
			return ""
		}
		name := strings.TrimSuffix(base, systemdSuffix)
		base = strings.ReplaceAll(name[strings.LastIndex(name, "-")+1:], "_", "-")
	}
	uid, ok := strings.CutPrefix(base, podPrefix)
	if !ok || uid == "" {
		return ""
	}
	return uid
}
