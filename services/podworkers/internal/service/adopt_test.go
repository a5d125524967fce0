package service

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/messaging"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/sim"
)

// busPod is a pod as podconfig would send it (it need not exist in the API
// server: the pod workers read it from the bus).
func (e *env) busPod(name string, mod func(*corev1.Pod)) *corev1.Pod {
	grace := int64(1)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: uuid.NewUUID(), CreationTimestamp: metav1.Now()},
		Spec: corev1.PodSpec{NodeName: e.node, TerminationGracePeriodSeconds: &grace, RestartPolicy: corev1.RestartPolicyAlways,
			Containers: []corev1.Container{{Name: "app", Image: "busybox", Command: []string{"sleep", "3600"}}}},
	}
	if e.podDefaults != nil {
		e.podDefaults(p)
	}
	if mod != nil {
		mod(p)
	}
	return p
}

// instance is what a status says of one container: which instance runs (or
// ran last) and how often it restarted.
type instance struct {
	id       string
	restarts int32
}

func instancesOf(st *bus.PodRuntimeStatus) map[string]instance {
	out := map[string]instance{}
	for _, list := range [][]corev1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses} {
		for _, c := range list {
			out[c.Name] = instance{c.ContainerID, c.RestartCount}
		}
	}
	return out
}

// settled: every container of the pod has an instance, running or (for a
// finished container) terminated.
func settled(st *bus.PodRuntimeStatus) bool {
	if st == nil || len(st.ContainerStatuses) == 0 {
		return false
	}
	for _, list := range [][]corev1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses} {
		for _, c := range list {
			if c.ContainerID == "" || (c.State.Running == nil && c.State.Terminated == nil) {
				return false
			}
		}
	}
	return true
}

// kill ends a replica as kill -9 would for the bus: its connection goes
// first, so it neither hands anything over nor says anything more; its
// runtime goes with it.
func kill(t *testing.T, r *Runner, conn *messaging.Conn) {
	t.Helper()
	conn.NC.Close()
	stopReplica(t, r)
}

// snapshot is every pod's instances as last reported, and how many status
// messages had arrived.
func (e *env) snapshot(pods []*corev1.Pod) (map[types.UID]map[string]instance, int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[types.UID]map[string]instance{}
	for _, p := range pods {
		out[p.UID] = instancesOf(e.status[p.UID])
	}
	return out, len(e.seen)
}

// reportedSince: every pod has a status message after the first n.
func (e *env) reportedSince(n int, pods []*corev1.Pod) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	seen := map[types.UID]bool{}
	for _, st := range e.seen[n:] {
		seen[st.UID] = true
	}
	for _, p := range pods {
		if !seen[p.UID] {
			return false
		}
	}
	return true
}

// noRestartSince fails the test for every status message after the first n
// that names another instance, or a restart count other than before.
func (e *env) noRestartSince(t *testing.T, n int, before map[types.UID]map[string]instance, except ...types.UID) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, st := range e.seen[n:] {
		want, ok := before[st.UID]
		if !ok || slices.Contains(except, st.UID) {
			continue
		}
		for name, got := range instancesOf(st) {
			if got != want[name] {
				t.Errorf("pod %s/%s container %s: %+v after, %+v before", st.Namespace, st.Name, name, got, want[name])
			}
		}
	}
}

func tuned(id string) func(*Config) {
	return func(c *Config) {
		c.ReplicaID = id
		c.LeaseRefresh = 100 * time.Millisecond
		c.LeaseTTL = time.Second
		c.FallbackAllocatable = "cpu=64,memory=256Gi,ephemeral-storage=1Ti,pods=5000"
	}
}

// flavour is a runtime the adoption tests run on: what differs between the
// sim and a real CRI runtime, the rest of each test being the same.
type flavour struct {
	// runtime is the replicas' --runtime; pods how many running pods the
	// tests start.
	runtime string
	pods    int
	// fresh, if set, makes the runtime of each replica the test starts
	// (else the replica makes its own).
	fresh func(t *testing.T, e *env) runtime.Runtime
	// orphan leaves a running pod in the runtime that no source wants
	// (deleted while no replica ran), and says how to tell it is gone.
	orphan func(t *testing.T, e *env) (*corev1.Pod, func() bool)
	// check, if set, asks the runtime itself (not a replica) what is wrong
	// with the pods: a sandbox or container created at since or later
	// (none may be when pods are adopted), or an instance of before it
	// does not hold.
	check func(t *testing.T, pods []*corev1.Pod, before map[types.UID]map[string]instance, since time.Time) []string
	// leaseTTL, if set, replaces the tests' short lease TTL (a slower
	// runtime on a loaded machine needs more slack before it fences).
	leaseTTL time.Duration
}

// replica starts a replica with the given id on the flavour's runtime.
func (f *flavour) replica(t *testing.T, e *env, id string) (*Runner, *messaging.Conn) {
	t.Helper()
	var rt runtime.Runtime
	if f.fresh != nil {
		rt = f.fresh(t, e)
	}
	tune := tuned(id)
	if f.leaseTTL > 0 {
		tune = func(c *Config) {
			tuned(id)(c)
			c.LeaseTTL, c.LeaseRefresh = f.leaseTTL, f.leaseTTL/10
		}
	}
	return e.startReplicaRuntime(t, f.runtime, tune, rt)
}

func simFlavour() *flavour {
	f := &flavour{runtime: config.RuntimeSim, pods: 300}
	var rt *sim.Runtime
	f.fresh = func(*testing.T, *env) runtime.Runtime { rt = sim.New(); return rt }
	// a pod that ran but only its status is left on the bus: the restarted
	// replica restores it, then finds no source wants it.
	f.orphan = func(t *testing.T, e *env) (*corev1.Pod, func() bool) {
		orphan := e.busPod("orphan", nil)
		e.publish(bus.For(e.node).PodStatus(bus.Partition(string(orphan.UID), partitions)), bus.KindPodRuntimeStatus, "", &bus.PodRuntimeStatus{
			UID: orphan.UID, Namespace: orphan.Namespace, Name: orphan.Name,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", ContainerID: "sim://0ff0ff", Image: "busybox",
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}})
		eventually(t, 30*time.Second, "the orphan's status on the bus", func() bool { st, _ := e.get(orphan.UID); return st != nil })
		return orphan, func() bool {
			return len(rt.PodContainers(orphan.UID)) == 0 && !slices.ContainsFunc(rt.Pods(), func(r runtime.PodRef) bool { return r.UID == orphan.UID })
		}
	}
	return f
}

// kill -9 of the only replica while its pods run, then a new replica with
// the same id and a fresh sim runtime: it resumes its leases at once,
// restores the pods from their last statuses on the bus and adopts them.
func TestRestartAdoptsPods(t *testing.T) {
	restartAdoptsPods(t, newEnv(t, "pw-restart"), simFlavour())
}

// restartAdoptsPods: kill -9 of the only replica while its pods run, then a
// new replica with the same id: it resumes its leases at once and adopts
// what the runtime holds. No container is started again, restart counts
// stay, the completed init container does not run again, the Succeeded
// restartPolicy Never pod keeps its exit code 0, and a pod no source wants
// any more is removed.
func restartAdoptsPods(t *testing.T, e *env, f *flavour) {
	a, connA := f.replica(t, e, "r1")
	var pods []*corev1.Pod
	for i := 0; i < f.pods; i++ {
		pods = append(pods, e.busPod(fmt.Sprintf("many-%d", i), nil))
	}
	// the annotations tell the sim how its containers end; a real runtime
	// runs the commands.
	done := e.busPod("done", func(p *corev1.Pod) {
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		p.Spec.Containers[0].Command = []string{"true"}
		p.Annotations = map[string]string{sim.AnnotationExitCode: "0", sim.AnnotationExitAfter: "10ms"}
	})
	withInit := e.busPod("with-init", func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox", ImagePullPolicy: p.Spec.Containers[0].ImagePullPolicy,
			Command: []string{"true"}}}
		p.Annotations = map[string]string{sim.AnnotationExitCode + ".init": "0"}
	})
	restarted := e.busPod("restarted", nil)
	pods = append(pods, done, withInit, restarted)
	e.track(pods...)
	e.send(bus.OpAdd, pods...)
	eventually(t, 120*time.Second, "every pod running (or finished)", func() bool {
		for _, p := range pods {
			if st, _ := e.get(p.UID); !settled(st) {
				return false
			}
		}
		st, _ := e.get(done.UID)
		return st.Terminated
	})
	// one container with a restart behind it (liveness failure).
	st, _ := e.get(restarted.UID)
	e.publish(bus.For(e.node).ProbeResults(bus.Partition(string(restarted.UID), partitions)), bus.KindProbeResult, "", &bus.ProbeResult{
		PodUID: restarted.UID, Namespace: restarted.Namespace, Name: restarted.Name, Container: "app",
		ContainerID: st.ContainerStatuses[0].ContainerID, Probe: bus.ProbeLiveness, Result: bus.ProbeFailure})
	eventually(t, 60*time.Second, "restarted once", func() bool {
		st, _ := e.get(restarted.UID)
		return st.ContainerStatuses[0].RestartCount == 1 && st.ContainerStatuses[0].State.Running != nil
	})
	before, _ := e.snapshot(pods)
	if got := before[withInit.UID]["init"]; got.id == "" {
		t.Fatalf("init container never reported: %+v", before[withInit.UID])
	}

	kill(t, a, connA)
	killed := time.Now()
	orphan, orphanGone := f.orphan(t, e)
	_, n := e.snapshot(pods)
	b, _ := f.replica(t, e, "r1")
	eventually(t, 10*time.Second, "the restarted replica owns every partition", func() bool {
		return slices.Equal(b.OwnedPartitions(), []int{0, 1, 2, 3})
	})
	eventually(t, 60*time.Second, "every pod reported again by the restarted replica", func() bool { return e.reportedSince(n, pods) })
	e.noRestartSince(t, n, before)
	after, _ := e.snapshot(pods)
	for _, p := range pods {
		if fmt.Sprint(after[p.UID]) != fmt.Sprint(before[p.UID]) {
			t.Errorf("pod %s: %v after the restart, %v before", p.Name, after[p.UID], before[p.UID])
		}
	}
	if after[restarted.UID]["app"].restarts != 1 {
		t.Errorf("restart count of the restarted container: %+v", after[restarted.UID])
	}
	sd, _ := e.get(done.UID)
	if term := sd.ContainerStatuses[0].State.Terminated; !sd.Terminated || term == nil || term.ExitCode != 0 || term.Reason != sim.ReasonCompleted {
		t.Errorf("Succeeded pod after the restart: %+v", sd.ContainerStatuses[0].State)
	}
	e.checkRuntime(t, f, pods, before, killed)
	// the orphan was adopted, then killed and removed by housekeeping,
	// without a status.
	eventually(t, 60*time.Second, "the orphan removed from the runtime", orphanGone)
	e.noStatusSince(t, n, orphan)
	// the adopted pods are driven as before: a DELETE stops one.
	e.send(bus.OpDelete, markDeleted(pods[0]))
	eventually(t, 60*time.Second, "deleted pod terminated", func() bool {
		st, _ := e.get(pods[0].UID)
		return st.Terminated && st.ContainerStatuses[0].ContainerID == before[pods[0].UID]["app"].id
	})
}

// A liveness failure sent while no replica runs is acted on by the next
// owner of its partition, which reads the partition's probe results from
// the first the stream holds. The failure of the instance before, read
// again with it, changes nothing: that container no longer runs.
func TestProbeResultWhileNoReplicaRuns(t *testing.T) {
	e := newEnv(t, "pw-probe-gap")
	f := simFlavour()
	a, connA := f.replica(t, e, "r1")
	p := e.busPod("gap", nil)
	part := bus.Partition(string(p.UID), partitions)
	e.track(p)
	e.send(bus.OpAdd, p)
	// running waits for the app container to run after n restarts under
	// an ID other than prev, and returns that ID.
	running := func(n int32, prev, what string) string {
		var id string
		eventually(t, 60*time.Second, what, func() bool {
			st, _ := e.get(p.UID)
			if !settled(st) {
				return false
			}
			c := st.ContainerStatuses[0]
			id = c.ContainerID
			return c.RestartCount == n && c.State.Running != nil && id != prev
		})
		return id
	}
	liveness := func(id string) {
		e.publish(bus.For(e.node).ProbeResults(part), bus.KindProbeResult, "", &bus.ProbeResult{PodUID: p.UID, Namespace: p.Namespace,
			Name: p.Name, Container: "app", ContainerID: id, Probe: bus.ProbeLiveness, Result: bus.ProbeFailure})
	}
	first := running(0, "", "the pod running")
	liveness(first)
	second := running(1, first, "restarted once, by the live replica")

	kill(t, a, connA)
	liveness(second)
	_, n := e.snapshot([]*corev1.Pod{p})
	f.replica(t, e, "r1")
	third := running(2, second, "restarted again, by the next owner")
	// the restart is the only change: the pod's deletion ends the
	// container the next owner started.
	e.send(bus.OpDelete, markDeleted(p))
	eventually(t, 30*time.Second, "the pod terminated", func() bool { st, _ := e.get(p.UID); return st.Terminated })
	st, _ := e.get(p.UID)
	if c := st.ContainerStatuses[0]; c.ContainerID != third || c.RestartCount != 2 {
		t.Errorf("final status: container %s after %d restarts; want %s after 2", c.ContainerID, c.RestartCount, third)
	}
	if !e.reportedSince(n, []*corev1.Pod{p}) {
		t.Error("no status from the next owner")
	}
}

// noStatusSince fails the test for a status of the pod after the first n.
func (e *env) noStatusSince(t *testing.T, n int, p *corev1.Pod) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, st := range e.seen[n:] {
		if st.UID == p.UID {
			t.Errorf("a status of %s was published: %+v", p.Name, st)
		}
	}
}

// slowTakeover is a sim runtime whose relist, which a replica runs when it
// takes a partition over, lasts two housekeeping rounds (each lists the
// runtime's pods): the partition is active then, its pods are in the
// runtime, and not yet in the controller.
type slowTakeover struct {
	*sim.Runtime
	mu       sync.Mutex
	lists    int
	relists  int
	timedOut bool
}

func (s *slowTakeover) Pods() []runtime.PodRef {
	s.mu.Lock()
	s.lists++
	s.mu.Unlock()
	return s.Runtime.Pods()
}

func (s *slowTakeover) Relist(ctx context.Context) error {
	s.mu.Lock()
	from := s.lists
	s.relists++
	s.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		n := s.lists
		if n < from+2 && time.Now().After(deadline) {
			s.timedOut = true
		}
		done := n >= from+2 || s.timedOut
		s.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Housekeeping that runs while a replica takes partitions over (replayed,
// restored into the runtime, not yet handed to the controller) takes none
// of their pods for orphans: the restarted replica restarts nothing.
func TestTakeoverIsNoOrphanHunt(t *testing.T) {
	e := newEnv(t, "pw-takeover-orphans")
	a, connA := e.startReplicaConn(t, config.RuntimeSim, tuned("r1"))
	pods := e.runningPods(t, "kept", 12)
	before, _ := e.snapshot(pods)
	kill(t, a, connA)
	_, n := e.snapshot(pods)
	rt := &slowTakeover{Runtime: sim.New()}
	b, _ := e.startReplicaRuntime(t, config.RuntimeSim, tuned("r1"), rt)
	eventually(t, 30*time.Second, "the restarted replica owns every partition", func() bool {
		return slices.Equal(b.OwnedPartitions(), []int{0, 1, 2, 3})
	})
	eventually(t, 60*time.Second, "every pod reported again", func() bool { return e.reportedSince(n, pods) })
	rt.mu.Lock()
	relists, timedOut := rt.relists, rt.timedOut
	rt.mu.Unlock()
	if relists < partitions || timedOut {
		t.Fatalf("%d takeovers relisted, housekeeping ran during each: %v; the test proves nothing", relists, !timedOut)
	}
	// a few more rounds of housekeeping.
	_, n2 := e.snapshot(pods)
	rt.mu.Lock()
	lists := rt.lists
	rt.mu.Unlock()
	eventually(t, 30*time.Second, "housekeeping after the takeover", func() bool {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return rt.lists >= lists+3
	})
	e.noRestartSince(t, n, before)
	e.mu.Lock()
	for _, st := range e.seen[n2:] {
		if st.Terminating || st.Terminated {
			t.Errorf("pod %s terminating after the takeover", st.Name)
		}
	}
	e.mu.Unlock()
	for _, p := range pods {
		if st, _ := e.get(p.UID); !containerRunning(st) || st.Terminating {
			t.Errorf("pod %s after the takeover: %+v", p.Name, st)
		}
	}
}
