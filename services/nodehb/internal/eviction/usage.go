package eviction

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// NodeUsage is the node's own CPU and memory, as the kubelet's summary
// gives its node (cadvisor's root container): measured from the root
// cgroup, so that system daemons, the agent and the kernel count, not only
// the pods.
type NodeUsage struct {
	// Time is when the figures were read.
	Time time.Time
	// CPUUsageCoreNanoSeconds is the CPU time used since boot.
	CPUUsageCoreNanoSeconds uint64
	Memory                  RootMemory
}

// Usage reads the node's CPU and memory.
func (h *Host) Usage() (NodeUsage, error) {
	cpu, err := h.rootCPU()
	if err != nil {
		return NodeUsage{}, err
	}
	mem, err := h.rootMemory()
	if err != nil {
		return NodeUsage{}, err
	}
	return NodeUsage{Time: time.Now(), CPUUsageCoreNanoSeconds: cpu, Memory: mem}, nil
}

// userHZ is the unit of /proc/stat's CPU times (USER_HZ, 100 on Linux).
const userHZ = 100

// rootCPU is the CPU time the root cgroup used, in nanoseconds: cgroup v1
// cpuacct.usage of the cpuacct hierarchy's root, v2 usage_usec of the
// root's cpu.stat; without either, the busy time of /proc/stat's cpu line.
func (h *Host) rootCPU() (uint64, error) {
	for _, d := range []string{"cpuacct", "cpu,cpuacct"} {
		b, err := os.ReadFile(filepath.Join(h.Cgroup, d, "cpuacct.usage"))
		if err != nil {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("cpuacct.usage: %w", err)
		}
		return v, nil
	}
	if stat, err := readKeyed(filepath.Join(h.Cgroup, "cpu.stat"), ""); err == nil {
		if v, ok := stat["usage_usec"]; ok {
			return uint64(v) * 1000, nil
		}
	}
	return h.procStatCPU()
}

// procStatCPU is the busy time of every CPU since boot: user, nice,
// system, irq, softirq and steal of /proc/stat's first line (idle and
// iowait are not use; guest time is inside user already).
func (h *Host) procStatCPU() (uint64, error) {
	f, err := os.Open(filepath.Join(h.Proc, "stat"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	if !s.Scan() {
		return 0, fmt.Errorf("/proc/stat: empty")
	}
	fields := strings.Fields(s.Text())
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: first line %q", s.Text())
	}
	var ticks uint64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system irq softirq steal
		v, err := strconv.ParseUint(fields[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		ticks += v
	}
	return ticks * (uint64(time.Second) / userHZ), nil
}
