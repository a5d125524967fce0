package app

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/api/resource"
)

// cgroupMemoryFiles hold the memory limit of the process's cgroup (v2, then
// v1); "max" or a huge v1 value means none.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// memoryLimit is the soft limit the memory-limit key asks for, in bytes
// (0: none), and where it comes from.
func memoryLimit(key string, files []string) (int64, string) {
	switch key {
	case "none":
		return 0, "memory-limit none"
	case "auto":
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
			// cgroup v1 writes "no limit" as a page-rounded maximum.
			if err != nil || v <= 0 || v >= 1<<60 {
				return 0, f + ": no limit"
			}
			return v / 10 * 9, "90% of " + f
		}
		return 0, "no cgroup memory limit"
	}
	q := resource.MustParse(key) // checked by config.Common.Complete
	return q.Value(), "memory-limit " + key
}

// applyMemoryLimit sets the Go runtime's soft memory limit from the key,
// unless GOMEMLIMIT (read by the runtime itself) is set.
func applyMemoryLimit(key string, log *zap.Logger) {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		log.Info("memory limit from GOMEMLIMIT", zap.String("GOMEMLIMIT", v))
		return
	}
	limit, from := memoryLimit(key, cgroupMemoryFiles)
	if limit > 0 {
		debug.SetMemoryLimit(limit)
		log.Info("memory limit set", zap.Int64("bytes", limit), zap.String("from", from))
	}
}
