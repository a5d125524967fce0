package process

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/runtime"
)

// procStat is what the runtime reads of /proc/<pid>/stat.
type procStat struct {
	pid, ppid, pgrp              int
	state                        byte
	utime, stime, cutime, cstime uint64 // clock ticks
	start                        uint64 // clock ticks after boot
	rssPages                     uint64
}

// clockTicks is USER_HZ, 100 on every Linux the runtime targets.
const clockTicks = 100

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(b)
}

// parseProcStat parses "pid (comm) state ppid pgrp ..."; comm may hold
// spaces and parentheses, so the fields start after the last ')'.
func parseProcStat(b []byte) (procStat, error) {
	var s procStat
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return s, errors.New("malformed /proc stat")
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return s, err
	}
	f := bytes.Fields(b[end+1:])
	// f[0] is field 3 (state) of proc(5).
	if len(f) < 22 {
		return s, errors.New("short /proc stat")
	}
	num := func(i int) uint64 { n, _ := strconv.ParseUint(string(f[i]), 10, 64); return n }
	s.pid = pid
	s.state = f[0][0]
	s.ppid = int(num(1))
	s.pgrp = int(num(2))
	s.utime, s.stime, s.cutime, s.cstime = num(11), num(12), num(13), num(14)
	s.start = num(19)
	s.rssPages = num(21)
	return s, nil
}

// groupMembers lists the processes whose process group is one of pgids.
func groupMembers(pgids map[int]bool) []procStat {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	var out []procStat
	for _, n := range names {
		if n[0] < '0' || n[0] > '9' {
			continue
		}
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		s, err := readProcStat(pid)
		if err != nil || !pgids[s.pgrp] {
			continue
		}
		out = append(out, s)
	}
	return out
}

// reapGroup kills what is left of process group pgid and reaps the members
// that are the runtime's children (orphans reparented to it). It returns
// once no live member is left, or after the reap timeout. Zombies of other
// parents are theirs to reap.
func (r *Runtime) reapGroup(pgid int) {
	self := os.Getpid()
	deadline := time.Now().Add(r.opts.reapTimeout)
	set := map[int]bool{pgid: true}
	for {
		left := false
		for _, m := range groupMembers(set) {
			if m.state == 'Z' || m.state == 'X' {
				if m.ppid == self {
					var ws unix.WaitStatus
					_, _ = unix.Wait4(m.pid, &ws, unix.WNOHANG, nil)
					left = true
				}
				continue
			}
			left = true
		}
		if !left || time.Now().After(deadline) {
			return
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		time.Sleep(5 * time.Millisecond)
	}
}

// cpuSample is the last CPU reading of a container, for the rate.
type cpuSample struct {
	at    time.Time
	total uint64 // ns
}

// Stats implements runtime.Runtime from /proc: CPU and resident memory of
// each running container's process group.
func (r *Runtime) Stats(uid types.UID) []runtime.ContainerStats {
	type entry struct {
		c   *container
		pid int
	}
	var running []entry
	r.Mu.Lock()
	if pd := r.Table.Pod(uid); pd != nil {
		for _, c := range pd.Instances {
			if c.status.State == runtime.StateRunning {
				running = append(running, entry{c, c.pid})
			}
		}
	}
	r.Mu.Unlock()
	if len(running) == 0 {
		return nil
	}
	set := make(map[int]bool, len(running))
	for _, e := range running {
		set[e.pid] = true
	}
	members := groupMembers(set)
	page := uint64(os.Getpagesize())
	now := time.Now()
	out := make([]runtime.ContainerStats, 0, len(running))
	r.Mu.Lock()
	defer r.Mu.Unlock()
	for _, e := range running {
		var ticks, rss uint64
		for _, m := range members {
			if m.pgrp != e.pid {
				continue
			}
			ticks += m.utime + m.stime
			if m.pid == e.pid {
				ticks += m.cutime + m.cstime
			}
			rss += m.rssPages * page
		}
		total := ticks * (uint64(time.Second) / clockTicks)
		cs := runtime.ContainerStats{
			ContainerID:           e.c.status.ID,
			Name:                  e.c.status.Name,
			StartedAt:             e.c.status.StartedAt,
			CPUUsageCoreNanoSecs:  total,
			MemoryWorkingSetBytes: rss,
		}
		if prev := e.c.cpu; !prev.at.IsZero() && now.After(prev.at) && total >= prev.total {
			cs.CPUUsageNanoCores = uint64(float64(total-prev.total) / now.Sub(prev.at).Seconds())
		}
		e.c.cpu = cpuSample{at: now, total: total}
		out = append(out, cs)
	}
	return out
}
