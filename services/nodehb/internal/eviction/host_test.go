package eviction

import (
	"os"
	"path/filepath"
	"testing"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestHostSignals: memory.available is MemTotal less the root cgroup's
// usage less its inactive file pages (cgroup v1; v2: MemTotal − MemFree
// for the usage); pid.available is the smaller limit less the processes.
func TestHostSignals(t *testing.T) {
	for _, v := range []struct {
		name   string
		cgroup map[string]string
		want   int64
	}{
		{"v1", map[string]string{"memory/memory.usage_in_bytes": "3221225472\n", "memory/memory.stat": "cache 1\ntotal_inactive_file 1073741824\n"}, 2 << 30},
		// v2: usage = 4 GiB − 1 GiB free = 3 GiB; less 1 GiB inactive.
		{"v2", map[string]string{"memory.stat": "anon 5\ninactive_file 1073741824\n"}, 2 << 30},
	} {
		t.Run(v.name, func(t *testing.T) {
			dir := t.TempDir()
			h := &Host{Proc: filepath.Join(dir, "proc"), Cgroup: filepath.Join(dir, "cgroup"), NodeFs: dir}
			write(t, filepath.Join(h.Proc, "meminfo"), "MemTotal:       4194304 kB\nMemFree:        1048576 kB\n")
			write(t, filepath.Join(h.Proc, "sys/kernel/pid_max"), "4194304\n")
			write(t, filepath.Join(h.Proc, "sys/kernel/threads-max"), "100000\n")
			for f, c := range v.cgroup {
				write(t, filepath.Join(h.Cgroup, f), c)
			}
			obs := Observations{}
			if err := h.Observe(obs); err != nil {
				t.Fatal(err)
			}
			if m := obs[MemoryAvailable]; m.Available != v.want || m.Capacity != 4<<30 {
				t.Fatalf("memory %+v, want available %d of %d", m, v.want, int64(4<<30))
			}
			if p := obs[PIDAvailable]; p.Capacity != 100000 || p.Available <= 0 || p.Available >= 100000 {
				t.Fatalf("pids %+v", p)
			}
			if fs := obs[NodeFsAvailable]; fs.Capacity <= 0 || fs.Available <= 0 {
				t.Fatalf("nodefs %+v", fs)
			}
		})
	}
}
