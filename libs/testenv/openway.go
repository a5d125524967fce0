package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// OpenWay makes dir's ancestors up to the temporary directory searchable by
// every user (a test's own directories are 0700), as the way to a node's
// data directory is on a host: pods that run as users of their own reach
// their directories under it.
func OpenWay(t testing.TB, dir string) {
	t.Helper()
	tmp := filepath.Clean(os.TempDir())
	for d := filepath.Dir(dir); strings.HasPrefix(d, tmp+"/"); d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, fi.Mode().Perm()|0o011); err != nil {
			t.Fatal(err)
		}
	}
}
