package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// Write makes the directory, replaces the content whole, keeps the file
// private whatever the mode of the one it replaces, and leaves no
// temporary file behind.
func TestWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "state.json")
	if err := Write(path, []byte("old content")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("new")); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "new" {
		t.Fatalf("content %q, %v; want new", got, err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v; want 0600", st.Mode(), err)
	}
	if d, err := os.Stat(filepath.Dir(path)); err != nil || d.Mode().Perm() != 0o700 {
		t.Fatalf("directory mode %v, %v; want 0700", d.Mode(), err)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil || len(entries) != 1 {
		t.Fatalf("directory holds %v, %v; want the file alone", entries, err)
	}
}
