package service

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/services/podworkers/internal/ownership"
)

// spreadIDs picks n replica ids that each win at least one of the test's
// partitions (with few partitions some sets of names leave one replica
// idle, which would prove nothing).
func spreadIDs(t *testing.T, prefix string, n int) []string {
	t.Helper()
	for i := 0; i < 100; i++ {
		var ids []string
		for r := 0; r < n; r++ {
			ids = append(ids, fmt.Sprintf("%s-%c%d", prefix, 'a'+r, i))
		}
		wins := map[string]bool{}
		for p := 0; p < partitions; p++ {
			wins[ownership.Preferred(p, ids)] = true
		}
		if len(wins) == n {
			return ids
		}
	}
	t.Fatalf("no %d ids share the partitions", n)
	return nil
}

// ownersAre: each replica owns exactly the partitions rendezvous gives it
// among the live ids.
func ownersAre(live []string, rs map[string]*Runner) bool {
	for id, r := range rs {
		var want []int
		for p := 0; p < partitions; p++ {
			if ownership.Preferred(p, live) == id {
				want = append(want, p)
			}
		}
		if !slices.Equal(r.OwnedPartitions(), want) {
			return false
		}
	}
	return true
}

// movedPods are the pods whose partition rendezvous gives to another
// replica among after than among before.
func movedPods(pods []*corev1.Pod, before, after []string) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		part := bus.Partition(string(p.UID), partitions)
		if ownership.Preferred(part, before) != ownership.Preferred(part, after) {
			out = append(out, p)
		}
	}
	return out
}

// busPodsSplit makes n bus pods (names prefix-<i>), a third of them in
// partitions that rendezvous gives another replica among after than among
// before and the rest in partitions it leaves: the ids fix how the
// partitions split, so the UIDs are drawn until both sides are filled.
func (e *env) busPodsSplit(prefix string, n int, before, after []string) []*corev1.Pod {
	var moving, staying []*corev1.Pod
	for len(moving)+len(staying) < n {
		p := e.busPod(fmt.Sprintf("%s-%d", prefix, len(moving)+len(staying)), nil)
		if len(movedPods([]*corev1.Pod{p}, before, after)) > 0 {
			if len(moving) < n/3 {
				moving = append(moving, p)
			}
		} else if len(staying) < n-n/3 {
			staying = append(staying, p)
		}
	}
	return append(moving, staying...)
}

// reportedByOwners: after the first n status messages, every pod has a
// status from the replica rendezvous gives its partition among live.
func (e *env) reportedByOwners(n int, pods []*corev1.Pod, live []string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	from := map[string]bool{}
	for i := n; i < len(e.seen); i++ {
		from[string(e.seen[i].UID)+" "+e.seenFrom[i]] = true
	}
	for _, p := range pods {
		owner := ownership.Preferred(bus.Partition(string(p.UID), partitions), live)
		if !from[string(p.UID)+" podworkers-"+owner] {
			return false
		}
	}
	return true
}

// runningPods starts n pods spread over the partitions, pod i in partition
// i mod partitions (random UIDs alone left a partition empty now and then,
// and a test about its hand-over proved nothing).
func (e *env) runningPods(t *testing.T, prefix string, n int) []*corev1.Pod {
	t.Helper()
	var pods []*corev1.Pod
	for i := 0; i < n; i++ {
		p := e.busPod(fmt.Sprintf("%s-%d", prefix, i), nil)
		for bus.Partition(string(p.UID), partitions) != i%partitions {
			p.UID = uuid.NewUUID()
		}
		pods = append(pods, p)
	}
	e.track(pods...)
	e.send(bus.OpAdd, pods...)
	eventually(t, 120*time.Second, "every pod running", func() bool {
		for _, p := range pods {
			if st, _ := e.get(p.UID); !containerRunning(st) {
				return false
			}
		}
		return true
	})
	return pods
}

// Three replicas, one killed: only its partitions move, to the replicas
// rendezvous names; the survivors keep theirs throughout, and the moved
// pods keep their containers.
func TestKilledReplicaOnlyItsPartitionsMove(t *testing.T) {
	killedReplicaOnlyItsPartitionsMove(t, newEnv(t, "pw-three"), simFlavour())
}

func killedReplicaOnlyItsPartitionsMove(t *testing.T, e *env, f *flavour) {
	ids := spreadIDs(t, "k", 3)
	rs := map[string]*Runner{}
	a, _ := f.replica(t, e, ids[0])
	b, _ := f.replica(t, e, ids[1])
	c, connC := f.replica(t, e, ids[2])
	rs[ids[0]], rs[ids[1]], rs[ids[2]] = a, b, c
	eventually(t, 30*time.Second, "partitions owned as rendezvous says", func() bool { return ownersAre(ids, rs) })
	pods := e.runningPods(t, "three", f.pods)
	eventually(t, 30*time.Second, "every pod reported by its owner", func() bool { return e.reportedByOwners(0, pods, ids) })
	before, n := e.snapshot(pods)
	keptA, keptB := a.OwnedPartitions(), b.OwnedPartitions()

	killed := time.Now()
	kill(t, c, connC)
	delete(rs, ids[2])
	survivors := ids[:2]
	eventually(t, 30*time.Second, "the dead replica's partitions taken by the survivors", func() bool {
		// the survivors never let go of what they had.
		for _, p := range keptA {
			if !slices.Contains(a.OwnedPartitions(), p) {
				t.Fatalf("%s lost partition %d", ids[0], p)
			}
		}
		for _, p := range keptB {
			if !slices.Contains(b.OwnedPartitions(), p) {
				t.Fatalf("%s lost partition %d", ids[1], p)
			}
		}
		return ownersAre(survivors, rs)
	})
	moved := movedPods(pods, ids, survivors)
	if len(moved) == 0 {
		t.Fatal("no pod in the dead replica's partitions: the test would prove nothing")
	}
	eventually(t, 60*time.Second, "the moved pods reported by their new owners", func() bool { return e.reportedByOwners(n, moved, survivors) })
	e.noRestartSince(t, n, before)
	// pods of partitions that did not move were not handed over at all.
	e.mu.Lock()
	for i := n; i < len(e.seen); i++ {
		p := bus.Partition(string(e.seen[i].UID), partitions)
		if ownership.Preferred(p, ids) != ids[2] {
			t.Errorf("pod %s of partition %d (not moved) reported again after the kill", e.seen[i].Name, p)
		}
	}
	e.mu.Unlock()
	e.checkRuntime(t, f, pods, before, killed)
}

// checkRuntime fails the test for what the runtime itself (where the
// flavour can ask it) shows wrong with the pods: a sandbox or container
// created at since or later, or an instance of before it does not hold.
func (e *env) checkRuntime(t *testing.T, f *flavour, pods []*corev1.Pod, before map[types.UID]map[string]instance, since time.Time) {
	t.Helper()
	if f.check == nil {
		return
	}
	for _, problem := range f.check(t, pods, before, since) {
		t.Error(problem)
	}
}

// Scale 1 -> 3 -> 1 with pods running: each hand-over moves only what the
// joining or leaving replicas win or held, and no container restarts.
func TestScaleOutAndInKeepsContainers(t *testing.T) {
	scaleOutAndInKeepsContainers(t, newEnv(t, "pw-scale-out"), simFlavour())
}

func scaleOutAndInKeepsContainers(t *testing.T, e *env, f *flavour) {
	ids := spreadIDs(t, "s", 3)
	a, _ := f.replica(t, e, ids[0])
	eventually(t, 30*time.Second, "one replica owns everything", func() bool { return len(a.OwnedPartitions()) == partitions })
	pods := e.runningPods(t, "scale", f.pods)
	before, n := e.snapshot(pods)
	scaled := time.Now()

	b, _ := f.replica(t, e, ids[1])
	c, _ := f.replica(t, e, ids[2])
	eventually(t, 30*time.Second, "three replicas own as rendezvous says", func() bool {
		return ownersAre(ids, map[string]*Runner{ids[0]: a, ids[1]: b, ids[2]: c})
	})
	moved := movedPods(pods, ids[:1], ids)
	if len(moved) == 0 || len(moved) == len(pods) {
		t.Fatalf("%d of %d pods moved: the test would prove nothing", len(moved), len(pods))
	}
	eventually(t, 60*time.Second, "the moved pods reported by their new owners", func() bool { return e.reportedByOwners(n, moved, ids) })
	e.noRestartSince(t, n, before)

	_, n2 := e.snapshot(pods)
	stopReplica(t, b)
	stopReplica(t, c)
	eventually(t, 30*time.Second, "the first replica owns everything again", func() bool { return len(a.OwnedPartitions()) == partitions })
	eventually(t, 60*time.Second, "every moved pod reported by the first replica", func() bool { return e.reportedByOwners(n2, moved, ids[:1]) })
	e.noRestartSince(t, n, before)
	after, _ := e.snapshot(pods)
	for _, p := range pods {
		if fmt.Sprint(after[p.UID]) != fmt.Sprint(before[p.UID]) {
			t.Errorf("pod %s: %v after scaling, %v before", p.Name, after[p.UID], before[p.UID])
		}
	}
	e.checkRuntime(t, f, pods, before, scaled)
}
