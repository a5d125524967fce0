package app

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMemoryLimit(t *testing.T) {
	dir := t.TempDir()
	write := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	limited := write("limited", "1073741824\n")
	max := write("max", "max\n")
	v1none := write("v1none", "9223372036854771712\n")
	for _, c := range []struct {
		key   string
		files []string
		want  int64
	}{
		{"auto", []string{limited}, 1073741824 / 10 * 9},
		{"auto", []string{max}, 0},
		{"auto", []string{filepath.Join(dir, "absent"), v1none}, 0},
		{"auto", []string{filepath.Join(dir, "absent")}, 0},
		{"none", []string{limited}, 0},
		{"512Mi", []string{limited}, 512 << 20},
	} {
		if got, from := memoryLimit(c.key, c.files); got != c.want {
			t.Errorf("%s with %v: %d (%s), want %d", c.key, c.files, got, from, c.want)
		}
	}
}
