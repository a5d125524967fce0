package app

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/splitlet/splitlet/libs/config"
)

// cgroupMemoryFiles hold the memory limit of the process's cgroup (v2, then
// v1); "max" or a huge v1 value means none.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// The memory budget of a process without a cgroup limit: a base for each
// service (the Go runtime, client-go, NATS clients, informers' fixed cost)
// and one for an embedded NATS server, plus each service's MemoryPerPod for
// every pod the node may hold.
const (
	ServiceMemoryBase      = 48 << 20
	EmbeddedNATSMemoryBase = 64 << 20
)

// MemoryBudget is the soft memory limit memory-limit auto gives a process
// running these services when its cgroup sets none: for the node's pod
// capacity (max-pods), room for the live heap of every pod with the Go
// collector's headroom, and a bound on the rest.
func MemoryBudget(common *config.Common, services []Service) int64 {
	if len(services) == 0 {
		return 0
	}
	var b int64
	for _, s := range services {
		b += ServiceMemoryBase + s.MemoryPerPod*int64(common.PodCapacity())
	}
	if common.NATSURL == "" {
		b += EmbeddedNATSMemoryBase
	}
	return b
}

// memoryLimit is the soft limit the memory-limit key asks for, in bytes
// (0: none), and where it comes from; budget is auto's figure when no
// cgroup limit applies.
func memoryLimit(key config.MemoryLimit, budget int64, files []string) (int64, string) {
	switch key.Mode {
	case config.MemoryLimitNone:
		return 0, "memory-limit none"
	case config.MemoryLimitAuto:
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
			// cgroup v1 writes "no limit" as a page-rounded maximum.
			if err != nil || v <= 0 || v >= 1<<60 {
				break
			}
			return v / 10 * 9, "90% of " + f
		}
		if budget > 0 {
			return budget, "the stages' budget for max-pods pods (no cgroup memory limit)"
		}
		return 0, "no cgroup memory limit"
	}
	return key.Bytes, "memory-limit " + key.String()
}

// applyMemoryLimit sets the Go runtime's soft memory limit from the key,
// unless GOMEMLIMIT (read by the runtime itself) is set.
func applyMemoryLimit(key config.MemoryLimit, budget int64, log *zap.Logger) {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		log.Info("memory limit from GOMEMLIMIT", zap.String("GOMEMLIMIT", v))
		return
	}
	limit, from := memoryLimit(key, budget, cgroupMemoryFiles)
	if limit > 0 {
		debug.SetMemoryLimit(limit)
		log.Info("memory limit set", zap.Int64("bytes", limit), zap.String("from", from))
	}
}
