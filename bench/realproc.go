package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/splitlet/splitlet/libs/periodic"
)

// procTimes is a process's CPU seconds (user + system) from
// /proc/<pid>/stat: its own, and its children's that it waited for (a
// runc, a mount, a du the agent ran and reaped).
type procTimes struct {
	self, children float64
}

func (t procTimes) total() float64 { return t.self + t.children }

// parseProcStat reads utime, stime, cutime and cstime (fields 14 to 17)
// from the text of a /proc/<pid>/stat.
func parseProcStat(stat string) (procTimes, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return procTimes{}, fmt.Errorf("no command name in %q", stat)
	}
	// Fields after the command name, which may hold spaces: state is the
	// first, utime (field 14 of the whole) the twelfth.
	rest := strings.Fields(stat[i+1:])
	if len(rest) < 15 {
		return procTimes{}, fmt.Errorf("too few fields in %q", stat)
	}
	var ticks [4]int64
	for k := range ticks {
		v, err := strconv.ParseInt(rest[11+k], 10, 64)
		if err != nil {
			return procTimes{}, fmt.Errorf("stat field %d: %w", 14+k, err)
		}
		ticks[k] = v
	}
	return procTimes{
		self:     float64(ticks[0]+ticks[1]) / clockTicks,
		children: float64(ticks[2]+ticks[3]) / clockTicks,
	}, nil
}

// readProcTimes reads a live process's CPU times.
func readProcTimes(pid int) (procTimes, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procTimes{}, err
	}
	return parseProcStat(string(data))
}

// cpuSnapshot is the CPU seconds, children included, of named processes.
type cpuSnapshot map[string]float64

// snapshotCPU reads the processes (pids, named names) once.
func snapshotCPU(pids []int, names []string) (cpuSnapshot, error) {
	s := cpuSnapshot{}
	for i, pid := range pids {
		t, err := readProcTimes(pid)
		if err != nil {
			return nil, fmt.Errorf("%s (pid %d): %w", names[i], pid, err)
		}
		s[names[i]] += t.total()
	}
	return s, nil
}

// since is each process's CPU from earlier to s, and their sum.
func (s cpuSnapshot) since(earlier cpuSnapshot) (float64, map[string]float64) {
	each := map[string]float64{}
	var sum float64
	for name, v := range s {
		each[name] = v - earlier[name]
		sum += each[name]
	}
	return sum, each
}

// shimAddress is the containerd address a running containerd-shim's
// command line (NUL-separated, as /proc/<pid>/cmdline holds it) serves, ""
// when it is not one: the shim's short "start" and "delete" runs are
// containerd's children, counted in containerd's own figure when reaped.
func shimAddress(cmdline []byte) string {
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	if len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
		return ""
	}
	if last := args[len(args)-1]; last == "start" || last == "delete" {
		return ""
	}
	for i, a := range args {
		if a == "-address" && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "-address="); ok {
			return v
		}
	}
	return ""
}

// mayBecomeShim: the process (by its command line) may exec a shim yet.
func mayBecomeShim(cmdline []byte) bool {
	first, _, _ := bytes.Cut(cmdline, []byte{0})
	return bytes.HasPrefix([]byte(filepath.Base(string(first))), []byte("containerd"))
}

// runtimeMeter counts the CPU of a containerd and its shims (each pod's
// containerd-shim, with the runc runs it reaped) over a window. Shims
// come and go within it, and a shim's CPU is lost with it (it is nobody's
// child to be reaped), so each is read every interval and its last reading
// kept: what a shim spent in its last interval is missed.
type runtimeMeter struct {
	containerdPID int
	address       string

	mu         sync.Mutex
	atStart    procTimes
	shimFirst  map[int]float64 // a shim's CPU when first seen (0 when born in the window)
	shimLast   map[int]float64
	notShim    map[int]bool
	firstSweep bool

	stop chan struct{}
	done chan struct{}
}

// startRuntimeMeter starts metering the containerd at pid, serving
// address, and its shims.
func startRuntimeMeter(pid int, address string, every time.Duration) (*runtimeMeter, error) {
	t, err := readProcTimes(pid)
	if err != nil {
		return nil, fmt.Errorf("containerd (pid %d): %w", pid, err)
	}
	m := &runtimeMeter{containerdPID: pid, address: address, atStart: t,
		shimFirst: map[int]float64{}, shimLast: map[int]float64{}, notShim: map[int]bool{},
		firstSweep: true, stop: make(chan struct{}), done: make(chan struct{})}
	m.sweep()
	go m.run(every)
	return m, nil
}

func (m *runtimeMeter) run(every time.Duration) {
	defer close(m.done)
	periodic.Run(wait.ContextForChannel(m.stop), every, func(context.Context) { m.sweep() })
}

// sweep finds the shims of the containerd and reads each one's CPU.
func (m *runtimeMeter) sweep() {
	entries, _ := os.ReadDir("/proc")
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || m.notShim[pid] {
			continue
		}
		if _, known := m.shimLast[pid]; !known {
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if err != nil || shimAddress(cmdline) != m.address {
				// Known for good not to be one, unless it may become one:
				// a child of containerd or of a shim not yet past its exec.
				// (A pid is not reused within a case: the kernel hands them
				// out in order, far from wrapping around.)
				m.notShim[pid] = err != nil || !mayBecomeShim(cmdline)
				continue
			}
		}
		t, err := readProcTimes(pid)
		if err != nil {
			continue
		}
		if _, known := m.shimLast[pid]; !known {
			m.shimFirst[pid] = 0
			if m.firstSweep {
				m.shimFirst[pid] = t.total()
			}
		}
		m.shimLast[pid] = t.total()
	}
	m.firstSweep = false
}

// end stops metering and returns containerd's CPU and its shims' over the
// window.
func (m *runtimeMeter) end() (containerd, shims float64, err error) {
	close(m.stop)
	<-m.done
	m.sweep()
	t, err := readProcTimes(m.containerdPID)
	if err != nil {
		return 0, 0, fmt.Errorf("containerd (pid %d): %w", m.containerdPID, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for pid, last := range m.shimLast {
		shims += last - m.shimFirst[pid]
	}
	return t.total() - m.atStart.total(), shims, nil
}

// pssParts reads each process's PSS in its parts: anonymous memory (heap,
// stacks) and file pages (the executable's), in bytes, by process name.
func pssParts(pids []int, names []string) (map[string]map[string]int64, error) {
	out := map[string]map[string]int64{}
	for i, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
		if err != nil {
			return nil, fmt.Errorf("%s (pid %d): %w", names[i], pid, err)
		}
		kib, err := statusKiB(string(data), "Pss_Anon", "Pss_File")
		if err != nil {
			return nil, fmt.Errorf("%s (pid %d): %w", names[i], pid, err)
		}
		out[names[i]] = map[string]int64{"anon": kib["Pss_Anon"] * 1024, "file": kib["Pss_File"] * 1024}
	}
	return out, nil
}
