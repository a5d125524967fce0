package machine

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMemTotal(t *testing.T) {
	p := filepath.Join(t.TempDir(), "meminfo")
	if err := os.WriteFile(p, []byte("MemTotal:       16314340 kB\nMemFree:         1000 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := memTotal(p); got != 16314340<<10 {
		t.Errorf("MemTotal: %d", got)
	}
	if got := memTotal(filepath.Join(t.TempDir(), "none")); got != 0 {
		t.Errorf("missing file: %d", got)
	}
	if MemoryCapacity() <= 0 {
		t.Error("this host's memory could not be read from /proc/meminfo")
	}
}
