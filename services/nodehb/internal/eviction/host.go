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

// memory: MemTotal less the root cgroup's working set. cgroup v1 has the
// root's usage in memory.usage_in_bytes; v2 has no memory.current at the
// root, where usage is MemTotal less MemFree (as cadvisor takes it).
func (h *Host) memory() (Observation, error) {
	mi, err := readKeyed(filepath.Join(h.Proc, "meminfo"), ":")
	if err != nil {
		return Observation{}, err
	}
	total := mi["MemTotal"] << 10
	if total <= 0 {
		return Observation{}, fmt.Errorf("meminfo: no MemTotal")
	}
	var usage, inactive int64
	v1 := filepath.Join(h.Cgroup, "memory")
	if b, err := os.ReadFile(filepath.Join(v1, "memory.usage_in_bytes")); err == nil {
		if usage, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
			return Observation{}, fmt.Errorf("memory.usage_in_bytes: %w", err)
		}
		stat, err := readKeyed(filepath.Join(v1, "memory.stat"), "")
		if err != nil {
			return Observation{}, err
		}
		inactive = stat["total_inactive_file"]
	} else {
		usage = total - mi["MemFree"]<<10
		stat, err := readKeyed(filepath.Join(h.Cgroup, "memory.stat"), "")
		if err != nil {
			return Observation{}, err
		}
		inactive = stat["inactive_file"]
	}
	ws := max(usage-inactive, 0)
	return Observation{Available: max(total-ws, 0), Capacity: total}, nil
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
