package cgroups

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultMount is where the cgroup hierarchies are mounted.
const DefaultMount = "/sys/fs/cgroup"

// FS writes cgroups on the host: on v2 (unified) one tree at the mount, on
// v1 the same directory in every mounted hierarchy, each controller's
// files in its own.
type FS struct {
	// V2 says the host runs the unified hierarchy.
	V2 bool
	// Mount is the v2 tree's root.
	Mount string
	// Hierarchies are the v1 hierarchies' mount points; Controllers maps a
	// v1 controller (cpu, memory, pids, cpuset) to its hierarchy.
	Hierarchies []string
	Controllers map[string]string
}

// DetectFS finds how the host mounts cgroups: v2 when /sys/fs/cgroup is a
// cgroup2 file system, else the v1 hierarchies of /proc/self/mountinfo
// (a hybrid host's cgroup2 mount beside them gets the directories but no
// value).
func DetectFS() (*FS, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(DefaultMount, &st); err != nil {
		return nil, fmt.Errorf("cgroups: %s: %w", DefaultMount, err)
	}
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		return &FS{V2: true, Mount: DefaultMount}, nil
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	defer f.Close()
	out, err := parseMountinfo(bufio.NewScanner(f))
	if err != nil {
		return nil, err
	}
	if len(out.Hierarchies) == 0 {
		return nil, errors.New("cgroups: no cgroup v1 hierarchy is mounted and /sys/fs/cgroup is not cgroup2")
	}
	return out, nil
}

// parseMountinfo collects the v1 cgroup mounts (fields: ... mount point
// (5th) ... "-" fstype source super-options).
func parseMountinfo(s *bufio.Scanner) (*FS, error) {
	out := &FS{Controllers: map[string]string{}}
	for s.Scan() {
		pre, post, ok := strings.Cut(s.Text(), " - ")
		if !ok {
			continue
		}
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(tail) < 3 || (tail[0] != "cgroup" && tail[0] != "cgroup2") {
			continue
		}
		mount := fields[4]
		if slices.Contains(out.Hierarchies, mount) {
			continue
		}
		// a hybrid host's cgroup2 tree holds no controller, but runc makes
		// the containers' cgroups there too: the layout is made and
		// removed there as well.
		out.Hierarchies = append(out.Hierarchies, mount)
		if tail[0] == "cgroup2" {
			continue
		}
		for _, opt := range strings.Split(tail[2], ",") {
			if _, taken := out.Controllers[opt]; !taken && opt != "rw" && opt != "ro" {
				out.Controllers[opt] = mount
			}
		}
	}
	return out, s.Err()
}

// dirs are the directories of the cgroup at path (a driver's Path).
func (f *FS) dirs(path string) []string {
	if f.V2 {
		return []string{filepath.Join(f.Mount, path)}
	}
	out := make([]string, len(f.Hierarchies))
	for i, h := range f.Hierarchies {
		out[i] = filepath.Join(h, path)
	}
	return out
}

// dir is the directory holding a controller's files of the cgroup at path
// ("" when the controller is not mounted).
func (f *FS) dir(controller, path string) string {
	if f.V2 {
		return filepath.Join(f.Mount, path)
	}
	if h, ok := f.Controllers[controller]; ok {
		return filepath.Join(h, path)
	}
	return ""
}

// Exists says whether the cgroup exists in every hierarchy.
func (f *FS) Exists(path string) bool {
	for _, d := range f.dirs(path) {
		if _, err := os.Stat(d); err != nil {
			return false
		}
	}
	return true
}

// Ensure creates the cgroup at path where it is missing (and its
// parents), then writes r.
func (f *FS) Ensure(path string, r Resources) error {
	if f.V2 {
		if err := f.mkdirV2(path); err != nil {
			return err
		}
	} else {
		for _, d := range f.dirs(path) {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("cgroups: %w", err)
			}
		}
		if err := f.fillCpuset(path); err != nil {
			return err
		}
	}
	return f.Set(path, r)
}

// fillCpuset gives each new v1 cpuset cgroup from the root down its
// parent's CPUs and memory nodes: an empty cpuset takes no process.
func (f *FS) fillCpuset(path string) error {
	root, ok := f.Controllers["cpuset"]
	if !ok {
		return nil
	}
	parent := root
	for _, part := range strings.Split(strings.Trim(path, "/"), "/") {
		if part == "" {
			continue
		}
		dir := filepath.Join(parent, part)
		for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
			cur, err := os.ReadFile(filepath.Join(dir, file))
			if err != nil || strings.TrimSpace(string(cur)) != "" {
				continue
			}
			from, err := os.ReadFile(filepath.Join(parent, file))
			if err != nil {
				return fmt.Errorf("cgroups: %w", err)
			}
			if err := writeFile(dir, file, strings.TrimSpace(string(from))); err != nil {
				return err
			}
		}
		parent = dir
	}
	return nil
}

// mkdirV2 creates each missing level of path, enabling in each parent the
// controllers the pods' cgroups use that the parent has.
func (f *FS) mkdirV2(path string) error {
	parent := f.Mount
	for _, part := range strings.Split(strings.Trim(path, "/"), "/") {
		if part == "" {
			continue
		}
		dir := filepath.Join(parent, part)
		if _, err := os.Stat(dir); err != nil {
			if err := enableControllers(parent); err != nil {
				return err
			}
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("cgroups: %w", err)
			}
		}
		parent = dir
	}
	return nil
}

// v2Controllers are the controllers enabled for the cgroups below kubepods.
var v2Controllers = []string{"cpu", "cpuset", "memory", "pids", "io", "hugetlb"}

func enableControllers(dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil // not a cgroup directory (a test's tree)
	}
	if err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	var enable []string
	for _, c := range strings.Fields(string(data)) {
		if slices.Contains(v2Controllers, c) {
			enable = append(enable, "+"+c)
		}
	}
	if len(enable) == 0 {
		return nil
	}
	return writeFile(dir, "cgroup.subtree_control", strings.Join(enable, " "))
}

// Set writes r's values into the cgroup at path.
func (f *FS) Set(path string, r Resources) error {
	var errs []error
	put := func(controller, file, value string) {
		if dir := f.dir(controller, path); dir != "" {
			errs = append(errs, writeFile(dir, file, value))
		}
	}
	if f.V2 {
		if r.CPUShares != nil {
			put("cpu", "cpu.weight", strconv.FormatUint(WeightOf(*r.CPUShares), 10))
		}
		if r.CPUQuota != nil || r.CPUPeriod != nil {
			put("cpu", "cpu.max", cpuMax(r.CPUQuota, r.CPUPeriod))
		}
		if r.Memory != nil {
			put("memory", "memory.max", limitV2(*r.Memory))
		}
		if r.PidsLimit != nil {
			put("pids", "pids.max", limitV2(*r.PidsLimit))
		}
		return errors.Join(errs...)
	}
	if r.CPUShares != nil {
		put("cpu", "cpu.shares", strconv.FormatUint(*r.CPUShares, 10))
	}
	if r.CPUPeriod != nil {
		put("cpu", "cpu.cfs_period_us", strconv.FormatUint(*r.CPUPeriod, 10))
	}
	if r.CPUQuota != nil {
		q := *r.CPUQuota
		if q <= 0 {
			q = -1
		}
		put("cpu", "cpu.cfs_quota_us", strconv.FormatInt(q, 10))
	}
	if r.Memory != nil {
		m := *r.Memory
		if m <= 0 {
			m = -1
		}
		put("memory", "memory.limit_in_bytes", strconv.FormatInt(m, 10))
	}
	if r.PidsLimit != nil {
		put("pids", "pids.max", limitV2(*r.PidsLimit))
	}
	return errors.Join(errs...)
}

// cpuMax is cgroup v2's cpu.max: "<quota> <period>", "max" for no quota.
func cpuMax(quota *int64, period *uint64) string {
	q, p := "max", uint64(QuotaPeriod)
	if quota != nil && *quota > 0 {
		q = strconv.FormatInt(*quota, 10)
	}
	if period != nil && *period > 0 {
		p = *period
	}
	return q + " " + strconv.FormatUint(p, 10)
}

// limitV2 writes a limit, "max" for none (<= 0).
func limitV2(v int64) string {
	if v <= 0 {
		return "max"
	}
	return strconv.FormatInt(v, 10)
}

func writeFile(dir, file, value string) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
		return fmt.Errorf("cgroups: write %q to %s: %w", value, filepath.Join(dir, file), err)
	}
	return nil
}

// Remove deletes the cgroup at path and the cgroups below it, deepest
// first, in every hierarchy. A cgroup a process is still in stays (the
// kernel refuses, EBUSY): Remove kills nothing.
func (f *FS) Remove(path string) error {
	var errs []error
	for _, d := range f.dirs(path) {
		// a cgroup without children goes at once (its control files do not
		// hold it); one with children is walked.
		if err := unix.Rmdir(d); err == nil || errors.Is(err, unix.ENOENT) {
			continue
		}
		var subdirs []string
		err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if e.IsDir() {
				subdirs = append(subdirs, p)
			}
			return nil
		})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for i := len(subdirs) - 1; i >= 0; i-- {
			if err := unix.Rmdir(subdirs[i]); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("cgroups: remove %s: %w", subdirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// Children are the names of the cgroups directly below the one at path
// (of the first hierarchy; the same in every one).
func (f *FS) Children(path string) ([]string, error) {
	dirs := f.dirs(path)
	if len(dirs) == 0 {
		return nil, nil
	}
	entries, err := os.ReadDir(dirs[0])
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// Pids is pids.current of the cgroup at path: the processes (threads
// included) in it and its children.
func (f *FS) Pids(path string) (uint64, error) {
	d := f.dir("pids", path)
	if d == "" {
		return 0, errors.New("cgroups: the pids controller is not mounted")
	}
	b, err := os.ReadFile(filepath.Join(d, "pids.current"))
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}
