package stagekit

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
)

// calls records what the kit hands a stage, one "added a", "updated a",
// "removed a" a call.
type calls struct {
	mu  sync.Mutex
	got []string
}

func (c *calls) add(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, s)
}

func (c *calls) PodAdded(_ string, p *corev1.Pod)   { c.add("added " + string(p.UID)) }
func (c *calls) PodUpdated(_ string, p *corev1.Pod) { c.add("updated " + string(p.UID)) }
func (c *calls) PodRemoved(uid types.UID)           { c.add("removed " + string(uid)) }

// take returns the calls so far, sorted, and forgets them.
func (c *calls) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	got := c.got
	c.got = nil
	slices.Sort(got)
	return got
}

func pods(uids ...string) []corev1.Pod {
	out := make([]corev1.Pod, 0, len(uids))
	for _, u := range uids {
		out = append(out, corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(u), Namespace: "ns", Name: u}})
	}
	return out
}

// send hands the set one PodUpdate of source on partition part's subject.
func send(t *testing.T, s *podSet, source string, part int, op bus.Op, u *bus.PodUpdate) {
	t.Helper()
	e, err := bus.NewEnvelope(bus.KindPodUpdate, "n", source, op, u)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.handlePodUpdate(t.Context(), bus.For("n").PodUpdates(part), e); err != nil {
		t.Fatal(err)
	}
}

func want(t *testing.T, c *calls, what string, w ...string) {
	t.Helper()
	slices.Sort(w)
	if got := c.take(); !slices.Equal(got, w) {
		t.Fatalf("%s: handed %q, want %q", what, got, w)
	}
}

func members(s *podSet) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for uid, m := range s.pods {
		out = append(out, fmt.Sprintf("%s:%s/%d", uid, m.source, m.partition))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// A SET replaces its source's pods of its partition, and only those: a pod
// it leaves out is removed, one it lists is added or updated; other
// sources' pods and other partitions' stay.
func TestSnapshotReplacesTheSet(t *testing.T) {
	c := &calls{}
	s := newPodSet(c, nil, zap.NewNop())
	send(t, s, "api", 0, bus.OpAdd, &bus.PodUpdate{Pods: pods("a", "b")})
	send(t, s, "file", 0, bus.OpAdd, &bus.PodUpdate{Pods: pods("f")})
	send(t, s, "api", 1, bus.OpAdd, &bus.PodUpdate{Pods: pods("p1")})
	want(t, c, "ADDs", "added a", "added b", "added f", "added p1")

	send(t, s, "api", 0, bus.OpSet, &bus.PodUpdate{Pods: pods("b", "e")})
	want(t, c, "the SET", "removed a", "updated b", "added e")
	if got, w := members(s), "b:api/0 e:api/0 f:file/0 p1:api/1"; got != w {
		t.Fatalf("set after the SET: %s, want %s", got, w)
	}

	// an empty SET: the source has no pods left in the partition.
	send(t, s, "api", 0, bus.OpSet, &bus.PodUpdate{})
	want(t, c, "the empty SET", "removed b", "removed e")
	if got, w := members(s), "f:file/0 p1:api/1"; got != w {
		t.Fatalf("set after the empty SET: %s, want %s", got, w)
	}
}

// A SET sent in parts is applied whole at its last part. When a part is
// missing (a gap: the stage started in its middle, or the source began a
// new snapshot) nothing of it is applied, and the source's next SET
// resyncs the set: the pods missed in between are added, those gone are
// removed.
func TestGapResyncsAtTheNextSet(t *testing.T) {
	c := &calls{}
	s := newPodSet(c, nil, zap.NewNop())
	send(t, s, "api", 0, bus.OpAdd, &bus.PodUpdate{Pods: pods("old")})
	want(t, c, "the ADD", "added old")

	parts := bus.SetParts(pods("a", "b", "c"), 3, "one")
	send(t, s, "api", 0, bus.OpSetPart, &parts[0])
	send(t, s, "api", 0, bus.OpSetPart, &parts[2]) // part 2 lost
	want(t, c, "a snapshot with a gap")
	if got := members(s); got != "old:api/0" {
		t.Fatalf("a snapshot with a gap changed the set: %s", got)
	}

	parts = bus.SetParts(pods("a", "b", "c"), 3, "two")
	for i := range parts {
		send(t, s, "api", 0, bus.OpSetPart, &parts[i])
		if i < len(parts)-1 && len(c.take()) != 0 {
			t.Fatalf("part %d of 3 applied before the last", i+1)
		}
	}
	want(t, c, "the next SET", "removed old", "added a", "added b", "added c")
	if got, w := members(s), "a:api/0 b:api/0 c:api/0"; got != w {
		t.Fatalf("set after the resync: %s, want %s", got, w)
	}
}

// UPDATE and DELETE of a known pod are updates; a REMOVE is handed on even
// for a pod the set never held (the stage may hold its status).
func TestOperations(t *testing.T) {
	c := &calls{}
	s := newPodSet(c, nil, zap.NewNop())
	send(t, s, "api", 0, bus.OpUpdate, &bus.PodUpdate{Pods: pods("a")})
	send(t, s, "api", 0, bus.OpUpdate, &bus.PodUpdate{Pods: pods("a")})
	send(t, s, "api", 0, bus.OpDelete, &bus.PodUpdate{Pods: pods("a")})
	want(t, c, "UPDATE, UPDATE, DELETE", "added a", "updated a", "updated a")
	send(t, s, "api", 0, bus.OpRemove, &bus.PodUpdate{Pods: pods("a", "never")})
	want(t, c, "the REMOVE", "removed a", "removed never")
	if got := members(s); got != "" {
		t.Fatalf("set after the REMOVE: %s, want none", got)
	}
}
