package service

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/runtime/process"
)

// On the process runtime a pod's containers die with the replica that ran
// them, so its next owner cannot adopt them; what it does must show: a
// container that was running is restarted one restart higher with the lost
// instance as its last state (ContainerStatusUnknown, 137), a running
// container of a restartPolicy Never pod is not run again and fails, and a
// container that had finished keeps its exit code and is not run again.
func TestProcessRestartIsVisible(t *testing.T) {
	e := newEnv(t, "pw-proc-restart")
	a, connA := e.startReplicaConn(t, config.RuntimeProcess, func(c *Config) { c.ReplicaID = "r1" })
	always := e.busPod("always", nil)
	done := e.busPod("done", func(p *corev1.Pod) {
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		p.Spec.Containers[0].Command = []string{"true"}
	})
	never := e.busPod("never", func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyNever })
	pods := []*corev1.Pod{always, done, never}
	e.track(pods...)
	e.send(bus.OpAdd, pods...)
	eventually(t, 60*time.Second, "two pods running, one finished", func() bool {
		for _, p := range pods {
			if st, _ := e.get(p.UID); !settled(st) {
				return false
			}
		}
		st, _ := e.get(done.UID)
		return st.Terminated
	})
	before, _ := e.snapshot(pods)
	kill(t, a, connA)
	_, n := e.snapshot(pods)
	e.startReplicaConn(t, config.RuntimeProcess, func(c *Config) { c.ReplicaID = "r1" })
	eventually(t, 60*time.Second, "every pod reported again", func() bool { return e.reportedSince(n, pods) })

	eventually(t, 60*time.Second, "the running container restarted, visibly", func() bool {
		st, _ := e.get(always.UID)
		c := st.ContainerStatuses[0]
		last := c.LastTerminationState.Terminated
		return c.State.Running != nil && c.RestartCount == before[always.UID]["app"].restarts+1 &&
			c.ContainerID != before[always.UID]["app"].id && last != nil &&
			last.ContainerID == before[always.UID]["app"].id && last.Reason == process.ReasonStatusUnknown && last.ExitCode == 137
	})
	eventually(t, 60*time.Second, "the Never pod's lost container failed, not run again", func() bool {
		st, _ := e.get(never.UID)
		c := st.ContainerStatuses[0]
		term := c.State.Terminated
		return term != nil && term.Reason == process.ReasonStatusUnknown && term.ExitCode == 137 &&
			c.ContainerID == before[never.UID]["app"].id && c.RestartCount == 0
	})
	st, _ := e.get(done.UID)
	c := st.ContainerStatuses[0]
	if term := c.State.Terminated; term == nil || term.ExitCode != 0 || term.Reason != process.ReasonCompleted ||
		c.ContainerID != before[done.UID]["app"].id || c.RestartCount != 0 || !st.Terminated {
		t.Errorf("the finished pod after the restart: %+v (id %s, was %s)", c.State, c.ContainerID, before[done.UID]["app"].id)
	}
}

// On the process runtime, a scale-out hands pods to a new replica (the old
// owner stops them), and when that replica is killed soon after, the
// partitions come back to the first one: every pod runs again there. (The
// compose e2e scale-then-kill scenario, where two moved pods once stayed
// not ready.)
func TestProcessScaleOutThenKillRunsEveryPodAgain(t *testing.T) {
	e := newEnv(t, "pw-proc-back")
	ids := spreadIDs(t, "pb", 2)
	a, _ := e.startReplicaConn(t, config.RuntimeProcess, tuned(ids[0]))
	eventually(t, 30*time.Second, "one replica owns everything", func() bool { return len(a.OwnedPartitions()) == partitions })
	pods := e.busPodsSplit("back", 12, ids[:1], ids)
	e.track(pods...)
	e.send(bus.OpAdd, pods...)
	running := func(since int, owner string, among []*corev1.Pod) func() bool {
		return func() bool {
			e.mu.Lock()
			defer e.mu.Unlock()
			last := map[types.UID]*bus.PodRuntimeStatus{}
			for i := since; i < len(e.seen); i++ {
				if owner == "" || e.seenFrom[i] == "podworkers-"+owner {
					last[e.seen[i].UID] = e.seen[i]
				}
			}
			for _, p := range among {
				if !containerRunning(last[p.UID]) {
					return false
				}
			}
			return true
		}
	}
	eventually(t, 60*time.Second, "every pod running", running(0, "", pods))

	b, connB := e.startReplicaConn(t, config.RuntimeProcess, tuned(ids[1]))
	eventually(t, 30*time.Second, "two replicas own as rendezvous says", func() bool {
		return ownersAre(ids, map[string]*Runner{ids[0]: a, ids[1]: b})
	})
	moved := movedPods(pods, ids[:1], ids)
	if len(moved) == 0 {
		t.Fatal("no pod moved: the test would prove nothing")
	}
	_, n := e.snapshot(pods)
	eventually(t, 60*time.Second, "the moved pods running on the new replica", running(0, ids[1], moved))
	kill(t, b, connB)
	eventually(t, 30*time.Second, "the first replica owns everything again", func() bool { return len(a.OwnedPartitions()) == partitions })
	eventually(t, 60*time.Second, "the moved pods running again on the first replica", running(n, ids[0], moved))
	// what the first replica said of them when it handed them over (their
	// kill) never goes out when it takes them back: a pod reported
	// terminated is Failed for good (statussync).
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := n; i < len(e.seen); i++ {
		if e.seenFrom[i] == "podworkers-"+ids[0] && e.seen[i].Terminated {
			t.Errorf("pod %s reported terminated by the replica that took it back", e.seen[i].Name)
		}
	}
}
