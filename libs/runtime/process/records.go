package process

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/periodic"
)

// Group records: a container's processes die with the pod worker only in
// part. Pdeathsig kills the group's leader when the runtime's process ends,
// but what the leader started (a background child in the same group) lives
// on, reparented to init. So each group the runtime starts is written down
// in the records directory, a file per group naming the group, its leader's
// start time and the runtime process that owns it; the file goes when the
// group is gone. Every runtime that shares the directory (the replicas of a
// node on one host, a restarted replica) sweeps it at start and then
// periodically: a record whose owner is dead names a group that nobody
// will stop, and the sweeper kills it.
//
// A process group ID is not reused while any member of the group lives, so
// a group that still has members is the recorded one unless a new leader
// with that ID exists, which the leader's start time tells apart.

// groupRecord is one group on disk.
type groupRecord struct {
	PGID int `json:"pgid"`
	// LeaderStart is the leader's start time in clock ticks after boot
	// (/proc/<pid>/stat field 22).
	LeaderStart uint64 `json:"leaderStart"`
	BootID      string `json:"bootID"`
	OwnerPID    int    `json:"ownerPID"`
	OwnerStart  uint64 `json:"ownerStart"`
	PodUID      string `json:"podUID,omitempty"`
	Container   string `json:"container,omitempty"`
}

// DefaultSweepInterval is how often a runtime looks for groups that dead
// owners left.
const DefaultSweepInterval = 5 * time.Second

// WithRecordDir sets the directory of group records (default: none, no
// records and no sweeping). Runtimes that should clean up after each
// other share it; it is created with mode 0700 and must be owned by the
// runtime's user.
func WithRecordDir(dir string) Option { return func(o *options) { o.recordDir = dir } }

// WithSweepInterval sets how often the records are swept (default
// DefaultSweepInterval).
func WithSweepInterval(d time.Duration) Option { return func(o *options) { o.sweepEvery = d } }

// selfIdentity is this process's pid and start time, which name the owner.
func selfIdentity() (int, uint64) {
	pid := os.Getpid()
	s, err := readProcStat(pid)
	if err != nil {
		return pid, 0
	}
	return pid, s.start
}

func bootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return string(bytes.TrimSpace(b))
}

// openRecordDir creates the records directory and checks that it is a
// directory of this user's, that no one else can write to.
func openRecordDir(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return "", fmt.Errorf("%s is not a directory", dir)
	case ok && int(st.Uid) != os.Geteuid():
		return "", fmt.Errorf("%s belongs to uid %d, not to this process's %d", dir, st.Uid, os.Geteuid())
	case fi.Mode().Perm()&0o022 != 0:
		return "", fmt.Errorf("%s can be written by others (mode %v)", dir, fi.Mode().Perm())
	}
	return dir, nil
}

func (r *Runtime) recordPath(pgid int) string {
	return filepath.Join(r.opts.recordDir, strconv.Itoa(pgid)+".json")
}

// record writes down a group the runtime started (best effort: a group
// without a record is still stopped by this runtime, only not by the next).
func (r *Runtime) record(pgid int, podUID, container string) {
	if r.opts.recordDir == "" {
		return
	}
	s, err := readProcStat(pgid)
	if err != nil {
		return // gone already
	}
	rec := groupRecord{PGID: pgid, LeaderStart: s.start, BootID: r.boot, OwnerPID: r.ownerPID, OwnerStart: r.ownerStart,
		PodUID: podUID, Container: container}
	b, _ := json.Marshal(rec)
	tmp := r.recordPath(pgid) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		r.log.Warn("cannot record a container's process group", zap.Int("pgid", pgid), zap.Error(err))
		return
	}
	if err := os.Rename(tmp, r.recordPath(pgid)); err != nil {
		r.log.Warn("cannot record a container's process group", zap.Int("pgid", pgid), zap.Error(err))
	}
}

// unrecord drops the record of a group that is gone.
func (r *Runtime) unrecord(pgid int) {
	if r.opts.recordDir == "" {
		return
	}
	if err := os.Remove(r.recordPath(pgid)); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.log.Debug("cannot remove a group record", zap.Int("pgid", pgid), zap.Error(err))
	}
}

// sweepLoop sweeps the records until the runtime is closed.
func (r *Runtime) sweepLoop() {
	defer close(r.sweepDone)
	periodic.Run(wait.ContextForChannel(r.stopSweep), r.opts.sweepEvery, func(context.Context) { r.Sweep() })
}

// Sweep kills the process groups that dead owners left and removes their
// records; it returns how many processes it killed.
func (r *Runtime) Sweep() int {
	if r.opts.recordDir == "" {
		return 0
	}
	entries, err := os.ReadDir(r.opts.recordDir)
	if err != nil {
		r.log.Warn("cannot read the group records", zap.String("dir", r.opts.recordDir), zap.Error(err))
		return 0
	}
	killed := 0
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".json") {
			if strings.HasSuffix(name, ".tmp") {
				r.dropStaleTmp(filepath.Join(r.opts.recordDir, name))
			}
			continue
		}
		path := filepath.Join(r.opts.recordDir, name)
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var rec groupRecord
		if err := json.Unmarshal(b, &rec); err != nil || rec.PGID <= 1 {
			r.log.Warn("dropping a malformed group record", zap.String("file", path), zap.Error(err))
			_ = os.Remove(path)
			continue
		}
		if rec.BootID != r.boot {
			_ = os.Remove(path) // from before a reboot: nothing of it runs
			continue
		}
		if alive(rec.OwnerPID, rec.OwnerStart) {
			continue
		}
		if leader, err := readProcStat(rec.PGID); err == nil && leader.start != rec.LeaderStart {
			_ = os.Remove(path) // the ID names a newer group now
			continue
		}
		members := groupMembers(map[int]bool{rec.PGID: true})
		live := 0
		for _, m := range members {
			if m.state != 'Z' && m.state != 'X' {
				live++
			}
		}
		if live > 0 {
			_ = syscall.Kill(-rec.PGID, syscall.SIGKILL)
			killed += live
			r.log.Info("killed the processes of a container whose pod worker is gone",
				zap.String(logging.FieldUID, rec.PodUID), zap.String("container", rec.Container),
				zap.Int("pgid", rec.PGID), zap.Int("processes", live), zap.Int("ownerPID", rec.OwnerPID))
		}
		_ = os.Remove(path)
	}
	return killed
}

// dropStaleTmp removes a half-written record that nobody is writing.
func (r *Runtime) dropStaleTmp(path string) {
	if fi, err := os.Stat(path); err == nil && time.Since(fi.ModTime()) > time.Minute {
		_ = os.Remove(path)
	}
}

// alive says whether the process pid runs and started at start.
func alive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	s, err := readProcStat(pid)
	if err != nil || s.state == 'Z' || s.state == 'X' {
		return false
	}
	return s.start == start
}
