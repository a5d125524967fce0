package cri

import (
	"testing"
	"time"

	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/gc"
)

// Of one container's instances the newest always stays, running or dead;
// of the older dead ones the newest MaxPerPodContainer stay, and those
// younger than MinAge; with all, every older dead one goes.
func TestEvictable(t *testing.T) {
	now := time.Now()
	mk := func(id string, state runtime.State, age time.Duration) *instance {
		return &instance{id: id, status: runtime.ContainerStatus{State: state, CreatedAt: now.Add(-age)}}
	}
	ids := func(list []*instance) string {
		s := ""
		for _, in := range list {
			s += in.id
		}
		return s
	}
	dead := []*instance{mk("a", runtime.StateExited, 4*time.Hour), mk("b", runtime.StateExited, 3*time.Hour),
		mk("c", runtime.StateExited, 2*time.Minute), mk("d", runtime.StateExited, time.Minute)}
	running := append(dead[:3:3], mk("r", runtime.StateRunning, 0))
	for _, c := range []struct {
		name string
		list []*instance
		p    gc.ContainerPolicy
		all  bool
		want string
	}{
		{"newest dead stays, one more kept", dead, gc.ContainerPolicy{MaxPerPodContainer: 1}, false, "ab"},
		{"running newest, one dead kept", running, gc.ContainerPolicy{MaxPerPodContainer: 1}, false, "ab"},
		{"none kept", running, gc.ContainerPolicy{MaxPerPodContainer: 0}, false, "abc"},
		{"no limit", running, gc.ContainerPolicy{MaxPerPodContainer: -1}, false, ""},
		{"minimum age", running, gc.ContainerPolicy{MaxPerPodContainer: 0, MinAge: time.Hour}, false, "ab"},
		{"all", dead, gc.ContainerPolicy{MaxPerPodContainer: 3}, true, "abc"},
		{"one instance", dead[:1], gc.ContainerPolicy{}, true, ""},
	} {
		if got := ids(evictable(c.list, c.p, c.all, now)); got != c.want {
			t.Errorf("%s: evictable %q, want %q", c.name, got, c.want)
		}
	}
}
