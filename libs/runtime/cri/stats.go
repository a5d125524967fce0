package cri

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/splitlet/splitlet/libs/runtime"
)

// cpuSample is a container's CPU time at a moment, to compute a rate.
type cpuSample struct {
	at    time.Time
	usage uint64
}

// Stats implements runtime.Runtime: ListContainerStats of the pod's
// running containers.
func (r *Runtime) Stats(uid types.UID) []runtime.ContainerStats {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := r.rs.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{labelPodUID: string(uid)}})
	if err != nil {
		return nil
	}
	out, logs := r.containerStats(list)
	for i := range out {
		out[i].LogsUsedBytes, out[i].LogsInodesUsed = logFilesUsage(logs[i])
	}
	return out
}

// PodProcessCount implements runtime.PodProcesses: pids.current of the
// pod's cgroup; without the cgroup layout (cgroups-per-qos off) none.
func (r *Runtime) PodProcessCount(p *corev1.Pod) (uint64, bool) {
	n := r.opts.cgroups
	if n == nil {
		return 0, false
	}
	count, err := n.FS().Pids(n.Parent(p))
	return count, err == nil
}

// containerStats turns the runtime's figures of the running containers it
// knows into stats; logs are their log paths, in the same order.
func (r *Runtime) containerStats(list []*runtimeapi.ContainerStats) (out []runtime.ContainerStats, logs []string) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range list {
		id := s.GetAttributes().GetId()
		in := r.byID[id]
		if in == nil || in.status.State != runtime.StateRunning {
			continue
		}
		cs := runtime.ContainerStats{
			ContainerID:           in.status.ID,
			Name:                  in.status.Name,
			StartedAt:             in.status.StartedAt,
			CPUUsageCoreNanoSecs:  s.GetCpu().GetUsageCoreNanoSeconds().GetValue(),
			MemoryWorkingSetBytes: s.GetMemory().GetWorkingSetBytes().GetValue(),
			RootfsUsedBytes:       s.GetWritableLayer().GetUsedBytes().GetValue(),
			RootfsInodesUsed:      s.GetWritableLayer().GetInodesUsed().GetValue(),
		}
		if nc := s.GetCpu().GetUsageNanoCores(); nc != nil {
			cs.CPUUsageNanoCores = nc.GetValue()
		} else if prev, ok := r.cpu[id]; ok && now.After(prev.at) && cs.CPUUsageCoreNanoSecs >= prev.usage {
			cs.CPUUsageNanoCores = uint64(float64(cs.CPUUsageCoreNanoSecs-prev.usage) / now.Sub(prev.at).Seconds())
		}
		r.cpu[id] = cpuSample{at: now, usage: cs.CPUUsageCoreNanoSecs}
		out = append(out, cs)
		logs = append(logs, in.status.LogPath)
	}
	return out, logs
}

// logFilesUsage is the disk space (allocated blocks, as du counts) and the
// inodes of a container's log file and its rotated files; 0 without a log.
func logFilesUsage(path string) (used, inodes uint64) {
	if path == "" {
		return 0, 0
	}
	files, _ := filepath.Glob(globEscape(path) + ".*")
	for _, f := range append(files, path) {
		var st unix.Stat_t
		if unix.Stat(f, &st) == nil {
			used += uint64(st.Blocks) * 512
			inodes++
		}
	}
	return used, inodes
}

// ImageFsStats implements runtime.ImageFs: the file system that holds the
// mount point CRI ImageFsInfo names (as the kubelet's stats provider finds
// it: the runtime tells where, the file system says how full).
func (r *Runtime) ImageFsStats(ctx context.Context) (runtime.FsStats, error) {
	info, err := r.is.ImageFsInfo(ctx)
	if err != nil {
		return runtime.FsStats{}, err
	}
	for _, fs := range info.GetImageFilesystems() {
		mp := fs.GetFsId().GetMountpoint()
		if mp == "" {
			continue
		}
		var st unix.Statfs_t
		if err := unix.Statfs(mp, &st); err != nil {
			return runtime.FsStats{}, fmt.Errorf("image file system %s: %w", mp, err)
		}
		var dev unix.Stat_t
		_ = unix.Stat(mp, &dev) // Device 0 when unknown
		return runtime.FsStats{AvailableBytes: st.Bavail * uint64(st.Bsize), CapacityBytes: st.Blocks * uint64(st.Bsize),
			InodesFree: st.Ffree, Inodes: st.Files, Device: uint64(dev.Dev)}, nil
	}
	return runtime.FsStats{}, fmt.Errorf("the runtime names no image file system")
}
