package eviction

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Host reads the node's own signals, as the kubelet's stats provider
// does: memory.available is MemTotal less the working set of the root
// memory cgroup (its usage less its inactive file pages), nodefs.* is the
// file system holding the data dir, pid.available is the smaller of
// kernel.pid_max and kernel.threads-max less the processes running.
type Host struct {
	// Proc and Cgroup are the roots of /proc and /sys/fs/cgroup (tests
	// point them elsewhere).
	Proc, Cgroup string
	// NodeFs is a directory on the node's file system (the data dir).
	NodeFs string
}

// NewHost reads the real host's files.
func NewHost(nodeFs string) *Host {
	return &Host{Proc: "/proc", Cgroup: "/sys/fs/cgroup", NodeFs: nodeFs}
}

// Observe adds the host's signals to obs; a signal it cannot read is left
// out (and its thresholds not met), with the error.
func (h *Host) Observe(obs Observations) error {
	var errs []string
	if o, err := h.memory(); err == nil {
		obs[MemoryAvailable] = o
	} else {
		errs = append(errs, err.Error())
	}
	var st unix.Statfs_t
	if err := unix.Statfs(h.NodeFs, &st); err == nil {
		obs[NodeFsAvailable] = Observation{Available: int64(st.Bavail) * st.Bsize, Capacity: int64(st.Blocks) * st.Bsize}
		if st.Files > 0 {
			obs[NodeFsInodesFree] = Observation{Available: int64(st.Ffree), Capacity: int64(st.Files)}
		}
	} else {
		errs = append(errs, fmt.Sprintf("nodefs %s: %v", h.NodeFs, err))
	}
	if o, err := h.pids(); err == nil {
		obs[PIDAvailable] = o
	} else {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return fmt.Errorf("eviction signals: %s", strings.Join(errs, "; "))
	}
	return nil
}

// memory: MemTotal less the root cgroup's working set.
func (h *Host) memory() (Observation, error) {
	m, err := h.rootMemory()
	if err != nil {
		return Observation{}, err
	}
	return Observation{Available: max(m.Total-m.WorkingSet, 0), Capacity: m.Total}, nil
}

// RootMemory is the root memory cgroup's figures, as cadvisor reads them
// for the root container, in bytes (faults in counts).
type RootMemory struct {
	// Total is MemTotal of /proc/meminfo, the root's limit.
	Total int64
	// Usage is the root's usage; WorkingSet that less its inactive file
	// pages, never below 0.
	Usage, WorkingSet int64
	// RSS is its anonymous memory; PageFaults and MajorPageFaults its
	// fault counters.
	RSS, PageFaults, MajorPageFaults int64
}

// rootMemory reads the root memory cgroup. cgroup v1 has the root's usage
// in memory.usage_in_bytes and hierarchical totals (total_*) in
// memory.stat; v2 has no memory.current at the root, where usage is
// MemTotal less MemFree (as cadvisor takes it), and memory.stat counts the
// whole hierarchy.
func (h *Host) rootMemory() (RootMemory, error) {
	mi, err := readKeyed(filepath.Join(h.Proc, "meminfo"), ":")
	if err != nil {
		return RootMemory{}, err
	}
	m := RootMemory{Total: mi["MemTotal"] << 10}
	if m.Total <= 0 {
		return RootMemory{}, fmt.Errorf("meminfo: no MemTotal")
	}
	prefix := "total_"
	v1 := filepath.Join(h.Cgroup, "memory")
	statFile := filepath.Join(v1, "memory.stat")
	if b, err := os.ReadFile(filepath.Join(v1, "memory.usage_in_bytes")); err == nil {
		if m.Usage, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
			return RootMemory{}, fmt.Errorf("memory.usage_in_bytes: %w", err)
		}
	} else {
		m.Usage = m.Total - mi["MemFree"]<<10
		prefix, statFile = "", filepath.Join(h.Cgroup, "memory.stat")
	}
	stat, err := readKeyed(statFile, "")
	if err != nil {
		return RootMemory{}, err
	}
	m.WorkingSet = max(m.Usage-stat[prefix+"inactive_file"], 0)
	if prefix == "" {
		m.RSS = stat["anon"]
	} else {
		m.RSS = stat["total_rss"]
	}
	m.PageFaults, m.MajorPageFaults = stat[prefix+"pgfault"], stat[prefix+"pgmajfault"]
	return m, nil
}

func (h *Host) pids() (Observation, error) {
	var limit int64
	for _, f := range []string{"sys/kernel/pid_max", "sys/kernel/threads-max"} {
		b, err := os.ReadFile(filepath.Join(h.Proc, f))
		if err != nil {
			return Observation{}, err
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return Observation{}, fmt.Errorf("%s: %w", f, err)
		}
		if limit == 0 || v < limit {
			limit = v
		}
	}
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return Observation{}, fmt.Errorf("sysinfo: %w", err)
	}
	return Observation{Available: limit - int64(si.Procs), Capacity: limit}, nil
}

// readKeyed reads "key<sep> value [unit]" lines into numbers.
func readKeyed(path, sep string) (map[string]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int64{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 2 {
			continue
		}
		v, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		out[strings.TrimSuffix(fields[0], sep)] = v
	}
	return out, s.Err()
}

// NodeFsDevice is the device of the node's file system (0 when it cannot
// be read).
func (h *Host) NodeFsDevice() uint64 {
	var st unix.Stat_t
	if err := unix.Stat(h.NodeFs, &st); err != nil {
		return 0
	}
	return uint64(st.Dev)
}
