package runtime_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/splitlet/splitlet/libs/runtime"
)

type inst struct{ st runtime.ContainerStatus }

func newTable() *runtime.PodTable[*inst] {
	return runtime.NewPodTable(func(c *inst) *runtime.ContainerStatus { return &c.st })
}

func TestPodTableKeepsNewestInstances(t *testing.T) {
	tb := newTable()
	add := func(name string, n int, state runtime.State) *inst {
		c := &inst{st: runtime.ContainerStatus{ID: fmt.Sprintf("sim://%s-%d", name, n), Name: name, State: state, PodUID: "u1"}}
		for _, d := range tb.Add("u1", "ns", "p", c) {
			if d.st.State != runtime.StateExited {
				t.Errorf("dropped %s, which is %s", d.st.ID, d.st.State)
			}
		}
		return c
	}
	first := add("app", 0, runtime.StateExited)
	add("side", 0, runtime.StateRunning)
	add("app", 1, runtime.StateExited)
	add("app", 2, runtime.StateRunning)
	if _, ok := tb.ByID(first.st.ID); ok {
		t.Errorf("the oldest exited instance of app is still held")
	}
	got := tb.Statuses("u1")
	want := []string{"sim://side-0", "sim://app-1", "sim://app-2"}
	if len(got) != len(want) {
		t.Fatalf("statuses %v, want %v", got, want)
	}
	for i := range want {
		if got[i].ID != want[i] {
			t.Errorf("statuses[%d] = %s, want %s (oldest first)", i, got[i].ID, want[i])
		}
	}
	if c, err := tb.Find("u1", "app", false); err != nil || c.st.ID != "sim://app-2" {
		t.Errorf("Find app: %v %v", c, err)
	}
	if c, err := tb.Find("u1", "app", true); err != nil || c.st.ID != "sim://app-1" {
		t.Errorf("Find app --previous: %v %v", c, err)
	}
	if _, err := tb.Find("u2", "app", false); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Find in an unknown pod: %v", err)
	}
	if c, busy := tb.Busy("u1", func(st *runtime.ContainerStatus) bool { return st.State == runtime.StateRunning }); !busy || c.st.ID != "sim://side-0" {
		t.Errorf("Busy: %v %v", c, busy)
	}
	if refs := tb.Refs(); len(refs) != 1 || refs[0].Namespace != "ns" || refs[0].Name != "p" {
		t.Errorf("Refs %v", refs)
	}
	n := 0
	for range tb.All() {
		n++
	}
	if n != 3 {
		t.Errorf("All yields %d instances, want 3", n)
	}
	if gone := tb.Remove("u1"); len(gone) != 3 || tb.Pod("u1") != nil || len(tb.Refs()) != 0 {
		t.Errorf("Remove: %d instances, pod %v", len(gone), tb.Pod("u1"))
	}
	if _, ok := tb.ByID("sim://app-2"); ok {
		t.Errorf("an instance of a removed pod is still found by ID")
	}
}

func TestExcessKeepsRunningInstances(t *testing.T) {
	list := []*inst{{st: runtime.ContainerStatus{State: runtime.StateRunning}}, {st: runtime.ContainerStatus{State: runtime.StateExited}},
		{st: runtime.ContainerStatus{State: runtime.StateExited}}, {st: runtime.ContainerStatus{State: runtime.StateRunning}}}
	got := runtime.Excess(list, func(c *inst) *runtime.ContainerStatus { return &c.st })
	if len(got) != 1 || got[0] != list[1] {
		t.Errorf("Excess = %v, want the exited second instance alone (the running oldest stays)", got)
	}
}
