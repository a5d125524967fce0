package volumes

import (
	"os"
	"path/filepath"
	"testing"
)

// TestEmptyDirUsage counts what a volume's files take on disk and their
// inodes, a hard link once, and 0 for a volume not set up.
func TestEmptyDirUsage(t *testing.T) {
	m := New(t.TempDir(), nil, nil)
	if n, err := m.EmptyDirUsage("uid-1", "scratch"); err != nil || n != 0 {
		t.Fatalf("no volume: %d, %v", n, err)
	}
	dir := filepath.Join(m.podDir("uid-1"), "volumes", dirEmptyDir, "scratch", "sub")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = 1 // not sparse
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "f"), filepath.Join(dir, "g")); err != nil {
		t.Fatal(err)
	}
	n, err := m.EmptyDirUsage("uid-1", "scratch")
	if err != nil || n < 3<<20 || n > 4<<20 {
		t.Fatalf("usage %d, %v; want about 3 MiB", n, err)
	}
	// the volume's root, sub and f (g is f again).
	if _, inodes, err := m.EmptyDirFsUsage("uid-1", "scratch"); err != nil || inodes != 3 {
		t.Fatalf("inodes %d, %v; want 3", inodes, err)
	}
	if _, err := m.EmptyDirUsage("uid-1", "../x"); err == nil {
		t.Fatal("a volume name out of the pod's directory accepted")
	}
}
