package recording

import (
	"testing"
	"time"
)

// TestLiveStateSettles: a live diff counts a key as differing once its two
// sides have disagreed for the settle time, reports it once, forgives a
// disagreement that ends sooner (one stage saw a change first), and leaves
// out a live key from before the shadow began that the shadow never spoke
// of (a pod that may be gone).
func TestLiveStateSettles(t *testing.T) {
	st := &liveState{settle: 2 * time.Second, drop: dropSet(nil), keys: map[string]*liveKey{}, pods: map[string]bool{}}
	t0 := time.Unix(1000, 0)
	at := func(e Entry, d time.Duration) Entry { e.Time = t0.Add(d); return e }
	// an old live key (before the shadow), then both sides on x and y.
	st.add(sideLive, at(probeEntry(1, "old", "Success"), -time.Minute))
	st.add(sideShadow, at(probeEntry(2, "x", "Success"), 0))
	st.add(sideLive, at(probeEntry(3, "x", "Failure"), 0))
	st.add(sideLive, at(probeEntry(4, "y", "Success"), time.Second))
	if d := st.check(t0); len(d) != 0 {
		t.Fatalf("differences before the settle time: %+v", d)
	}
	// x: the live side catches up within the settle time.
	st.add(sideLive, at(probeEntry(5, "x", "Success"), time.Second))
	if d := st.check(t0.Add(time.Second)); len(d) != 0 {
		t.Fatalf("differences before the settle time: %+v", d)
	}
	// y: the shadow never says anything; after the settle time it differs, once.
	d := st.check(t0.Add(3 * time.Second))
	if len(d) != 1 || d[0].Key != "d/p (u) container=y probe=Readiness" || d[0].Shadow != nil || d[0].Live == nil || d[0].Pod != "d/p (u)" {
		t.Fatalf("differences after the settle time: %+v; want y alone, shadow silent", d)
	}
	if d := st.check(t0.Add(10 * time.Second)); len(d) != 0 {
		t.Errorf("reported again: %+v", d)
	}
	s := st.summary()
	if s.Keys != 2 || s.Differ != 1 || len(s.Pods) != 1 || s.Live != 4 || s.Shadow != 1 || s.Compared != 5 {
		t.Errorf("summary %+v: want 2 keys (old left out), 1 differing, 4 live and 1 shadow messages", s)
	}
}

// TestShadowFilter: the shadow side reads the stage's outputs under its
// shadow prefix, in the shadow stream.
func TestShadowFilter(t *testing.T) {
	out, err := Outputs("n.a", "prober")
	if err != nil {
		t.Fatal(err)
	}
	f := shadowFilter("n.a", "prober", out)
	if got := f.Subjects["shadow"]; len(got) != 1 || got[0] != "splitlet.v1.n_a.shadow.prober.probes.*" || len(f.Subjects) != 1 {
		t.Errorf("shadow filter %+v", f.Subjects)
	}
}

// TestLiveOutputsPodworkers: the pod workers' live diff compares their pod
// statuses, under the shadow prefix on the shadow side, and not the agent
// readiness a shadow does not publish.
func TestLiveOutputsPodworkers(t *testing.T) {
	out, err := LiveOutputs("n", "podworkers")
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Subjects) != 1 || len(out.Subjects["podstatus"]) != 1 || out.Subjects["podstatus"][0] != "splitlet.v1.n.podstatus.*" {
		t.Errorf("live side %+v", out.Subjects)
	}
	f := shadowFilter("n", "podworkers", out)
	if got := f.Subjects["shadow"]; len(got) != 1 || got[0] != "splitlet.v1.n.shadow.podworkers.podstatus.*" {
		t.Errorf("shadow side %+v", f.Subjects)
	}
}
