package testenv

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// DataDir is a temporary directory for a node agent's data (its root
// directory, its pods' volumes). What the agent mounted under it is
// unmounted when the test ends, before the directory is removed: register
// the agent's stop after this call, so that it runs first.
func DataDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() {
		if err := UnmountUnder(dir); err != nil {
			t.Errorf("unmounting what the agent left under %s: %v", dir, err)
		}
	})
	return dir
}

// UnmountUnder unmounts every mount point at or below dir, deepest first
// (a node agent's bind mount of its root directory onto itself and the
// tmpfs of secret, projected and memory emptyDir volumes stay behind when
// it stops). The unmounts are lazy: a container that still uses one keeps
// it until it goes.
func UnmountUnder(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// The fifth field is the mount point, with spaces and the like
		// escaped as octal.
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMountinfo(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	// Deepest first; a path mounted several times is unmounted as often.
	sort.SliceStable(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL && err != syscall.ENOENT {
			return fmt.Errorf("unmount %s: %w", p, err)
		}
	}
	return nil
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) of a path
// in /proc/self/mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
