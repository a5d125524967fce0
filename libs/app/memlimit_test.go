package app

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/splitlet/splitlet/libs/config"
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
	const budget = 300 << 20
	for _, c := range []struct {
		key    string
		budget int64
		files  []string
		want   int64
	}{
		{"auto", budget, []string{limited}, 1073741824 / 10 * 9},
		{"auto", 0, []string{max}, 0},
		{"auto", budget, []string{max}, budget},
		{"auto", 0, []string{filepath.Join(dir, "absent"), v1none}, 0},
		{"auto", budget, []string{filepath.Join(dir, "absent"), v1none}, budget},
		{"auto", 0, []string{filepath.Join(dir, "absent")}, 0},
		{"auto", budget, []string{filepath.Join(dir, "absent")}, budget},
		{"none", budget, []string{limited}, 0},
		{"512Mi", budget, []string{limited}, 512 << 20},
	} {
		var key config.MemoryLimit
		if err := key.Set(c.key); err != nil {
			t.Fatal(err)
		}
		if got, from := memoryLimit(key, c.budget, c.files); got != c.want {
			t.Errorf("%s with %v: %d (%s), want %d", c.key, c.files, got, from, c.want)
		}
	}
}

// TestMemoryBudget: a base per service and per embedded NATS server, and
// each service's share for every pod of the node's capacity.
func TestMemoryBudget(t *testing.T) {
	a := Service{Name: "a", MemoryPerPod: 10 << 10}
	b := Service{Name: "b"}
	sim := &config.Common{Runtime: config.RuntimeSim, NATSURL: "nats://127.0.0.1:4222"}
	if got, want := MemoryBudget(sim, []Service{a}), int64(ServiceMemoryBase+20000*(10<<10)); got != want {
		t.Errorf("sim, one service: %d, want %d", got, want)
	}
	proc := &config.Common{Runtime: config.RuntimeProcess, MaxPods: 50}
	if got, want := MemoryBudget(proc, []Service{a, b}), int64(2*ServiceMemoryBase+EmbeddedNATSMemoryBase+50*(10<<10)); got != want {
		t.Errorf("process, two services, embedded NATS: %d, want %d", got, want)
	}
	if got := MemoryBudget(proc, nil); got != 0 {
		t.Errorf("no services: %d", got)
	}
}
