package eviction

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNodeUsageFiles: the node's CPU is cgroup v1's cpuacct.usage of the
// root, v2's usage_usec of the root's cpu.stat, else /proc/stat's busy
// ticks; its memory is the root cgroup's usage less its inactive file
// pages, with RSS and faults of the hierarchy.
func TestNodeUsageFiles(t *testing.T) {
	const gib = int64(1 << 30)
	for _, v := range []struct {
		name    string
		cgroup  map[string]string
		cpu     uint64
		ws, rss int64
		faults  int64
	}{
		{"v1", map[string]string{
			"cpuacct/cpuacct.usage":        "123456789012\n",
			"memory/memory.usage_in_bytes": "3221225472\n",
			"memory/memory.stat":           "rss 1\ntotal_rss 536870912\ntotal_inactive_file 1073741824\ntotal_pgfault 70\ntotal_pgmajfault 7\n",
		}, 123456789012, 2 * gib, 512 << 20, 70},
		{"v1 cpu,cpuacct", map[string]string{
			"cpu,cpuacct/cpuacct.usage":    "42\n",
			"memory/memory.usage_in_bytes": "3221225472\n",
			"memory/memory.stat":           "total_inactive_file 4294967296\n",
		}, 42, 0, 0, 0},
		// v2: usage = 4 GiB − 1 GiB free = 3 GiB; less 1 GiB inactive.
		{"v2", map[string]string{
			"cpu.stat":    "usage_usec 5000000\nuser_usec 1\n",
			"memory.stat": "anon 536870912\ninactive_file 1073741824\npgfault 80\npgmajfault 8\n",
		}, 5_000_000_000, 2 * gib, 512 << 20, 80},
		// no CPU controller: /proc/stat's user+nice+system+irq+softirq+steal.
		{"proc/stat", map[string]string{"memory.stat": "inactive_file 0\n"}, 2100 * 10_000_000, 3 * gib, 0, 0},
	} {
		t.Run(v.name, func(t *testing.T) {
			dir := t.TempDir()
			h := &Host{Proc: filepath.Join(dir, "proc"), Cgroup: filepath.Join(dir, "cgroup"), NodeFs: dir}
			write(t, filepath.Join(h.Proc, "meminfo"), "MemTotal:       4194304 kB\nMemFree:        1048576 kB\n")
			write(t, filepath.Join(h.Proc, "stat"), "cpu  1000 100 500 99999 777 200 300 0 40 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
			for f, c := range v.cgroup {
				write(t, filepath.Join(h.Cgroup, f), c)
			}
			u, err := h.Usage()
			if err != nil {
				t.Fatal(err)
			}
			if u.CPUUsageCoreNanoSeconds != v.cpu {
				t.Errorf("cpu %d, want %d", u.CPUUsageCoreNanoSeconds, v.cpu)
			}
			m := u.Memory
			if m.Total != 4*gib || m.Usage != 3*gib || m.WorkingSet != v.ws || m.RSS != v.rss || m.PageFaults != v.faults {
				t.Errorf("memory %+v, want working set %d, rss %d, faults %d", m, v.ws, v.rss, v.faults)
			}
		})
	}
}

// TestNodeUsageKernel: on this host, the node's figures are the kernel's
// root cgroup files read at the same time: CPU between two reads of the
// root's usage around it, working set within 64 MiB of the root's usage
// less its inactive file pages read just before and after.
func TestNodeUsageKernel(t *testing.T) {
	h := NewHost(t.TempDir())
	cpuFile, ws := kernelRoot(t)
	before := readUint(t, cpuFile)
	wsBefore := ws()
	u, err := h.Usage()
	if err != nil {
		t.Fatal(err)
	}
	after := readUint(t, cpuFile)
	wsAfter := ws()
	if u.CPUUsageCoreNanoSeconds < before || u.CPUUsageCoreNanoSeconds > after {
		t.Errorf("node cpu %d ns, the kernel's %s %d before and %d after", u.CPUUsageCoreNanoSeconds, cpuFile, before, after)
	}
	const slack = 64 << 20
	lo, hi := min(wsBefore, wsAfter)-slack, max(wsBefore, wsAfter)+slack
	if u.Memory.WorkingSet < lo || u.Memory.WorkingSet > hi {
		t.Errorf("node working set %d, the kernel's %d before and %d after", u.Memory.WorkingSet, wsBefore, wsAfter)
	}
	if u.Memory.WorkingSet <= 0 || u.Memory.WorkingSet > u.Memory.Total || u.Memory.RSS <= 0 {
		t.Errorf("node memory %+v", u.Memory)
	}
}

// kernelRoot finds the root cgroup's CPU counter (nanoseconds) and how to
// compute its working set, cgroup v1 or v2, as the test reads them itself.
func kernelRoot(t *testing.T) (cpuFile string, ws func() int64) {
	t.Helper()
	meminfo := func(key string) int64 { return keyedFile(t, "/proc/meminfo")[key+":"] << 10 }
	if _, err := os.Stat("/sys/fs/cgroup/cpuacct/cpuacct.usage"); err == nil {
		return "/sys/fs/cgroup/cpuacct/cpuacct.usage", func() int64 {
			usage := int64(readUint(t, "/sys/fs/cgroup/memory/memory.usage_in_bytes"))
			return usage - keyedFile(t, "/sys/fs/cgroup/memory/memory.stat")["total_inactive_file"]
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/cpu.stat"); err == nil {
		return "", func() int64 {
			usage := meminfo("MemTotal") - meminfo("MemFree")
			return usage - keyedFile(t, "/sys/fs/cgroup/memory.stat")["inactive_file"]
		}
	}
	t.Fatal("neither a cgroup v1 cpuacct nor a cgroup v2 root at /sys/fs/cgroup")
	return "", nil
}

func readUint(t *testing.T, path string) uint64 {
	t.Helper()
	if path == "" { // cgroup v2: the root's cpu.stat, in microseconds
		return uint64(keyedFile(t, "/sys/fs/cgroup/cpu.stat")["usage_usec"]) * 1000
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// keyedFile reads "key value" lines as the kernel writes them (the key
// keeps its colon).
func keyedFile(t *testing.T, path string) map[string]int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			out[f[0]] = v
		}
	}
	return out
}
