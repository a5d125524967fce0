// Package machine reads what the node agent's stages need to know about the
// host they run on.
package machine

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// MemoryCapacity is the host's memory in bytes (MemTotal of /proc/meminfo,
// what the kubelet reports as memory capacity), 0 when it cannot be read.
func MemoryCapacity() int64 {
	return memTotal("/proc/meminfo")
}

func memTotal(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kib, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil || kib < 0 {
				return 0
			}
			return kib << 10
		}
	}
	return 0
}
