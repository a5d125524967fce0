package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
)

const (
	namespace = "default"
	// Ports of the test pods' servers (busybox httpd) on 127.0.0.1: every
	// pod shares the host's network, so each gets its own.
	firstPort = 18100
	flakyPort = 18199
	// maxWeb bounds the web pods added until every replica owns one.
	// Rendezvous hashing may give a replica a single partition of 16 (about
	// one run in seventy with three replicas), which 24 pods miss one time
	// in five; 64 pods miss it one time in sixty of those.
	maxWeb = 64
)

func ptr[T any](v T) *T { return &v }

func tcpProbe(port, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Host: "127.0.0.1", Port: intstr.FromInt32(port)}},
		PeriodSeconds:    period,
		TimeoutSeconds:   1,
		FailureThreshold: failures,
	}
}

// webPod runs busybox httpd on its port and prints a line a second; it is
// Ready when the port accepts connections (readiness and liveness are
// tcpSocket probes, which every prober stage handles).
func webPod(name string, port int32) *corev1.Pod {
	script := fmt.Sprintf(`echo "hello from %[1]s"; httpd -f -p 127.0.0.1:%[2]d -h /tmp & i=0; while true; do echo "%[1]s tick $i"; i=$((i+1)); sleep 1; done`, name, port)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"e2e": "web"}},
		Spec: corev1.PodSpec{
			NodeName:                      nodeName,
			TerminationGracePeriodSeconds: ptr(int64(5)),
			Containers: []corev1.Container{{
				Name:           "web",
				Image:          "busybox",
				Command:        []string{"sh", "-c", script},
				ReadinessProbe: tcpProbe(port, 1, 1),
				LivenessProbe:  tcpProbe(port, 2, 5),
			}},
		},
	}
}

// flakyPod's server stops after a few seconds, so its liveness probe fails
// and the container is restarted.
func flakyPod(name string, port int32) *corev1.Pod {
	script := fmt.Sprintf(`echo "flaky up"; httpd -f -p 127.0.0.1:%d -h /tmp & pid=$!; sleep 4; kill $pid; echo "flaky server stopped"; sleep 3600`, port)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"e2e": "flaky"}},
		Spec: corev1.PodSpec{
			NodeName:                      nodeName,
			TerminationGracePeriodSeconds: ptr(int64(2)),
			Containers: []corev1.Container{{
				Name:          "flaky",
				Image:         "busybox",
				Command:       []string{"sh", "-c", script},
				LivenessProbe: tcpProbe(port, 1, 2),
			}},
		},
	}
}

func podCondition(p *corev1.Pod, c corev1.PodConditionType) corev1.ConditionStatus {
	for _, cond := range p.Status.Conditions {
		if cond.Type == c {
			return cond.Status
		}
	}
	return ""
}

func runningReady(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && podCondition(p, corev1.PodReady) == corev1.ConditionTrue
}

// notReadyWhy says what a pod that is not Running and Ready shows: its
// phase, its Ready condition and each container's state, so that a failed
// wait names the cause.
func notReadyWhy(p *corev1.Pod) string {
	if p == nil {
		return " (no such pod)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, " (phase %s", p.Status.Phase)
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			fmt.Fprintf(&b, ", Ready %s %s", c.Status, c.Reason)
		}
	}
	for _, c := range p.Status.ContainerStatuses {
		fmt.Fprintf(&b, ", %s ready=%t restarts=%d id=%.20s", c.Name, c.Ready, c.RestartCount, strings.TrimPrefix(c.ContainerID, "process://"))
		switch st := c.State; {
		case st.Running != nil:
			fmt.Fprintf(&b, " running since %s", st.Running.StartedAt.Format(time.TimeOnly))
		case st.Waiting != nil:
			fmt.Fprintf(&b, " waiting %s %s", st.Waiting.Reason, st.Waiting.Message)
		case st.Terminated != nil:
			fmt.Fprintf(&b, " terminated %d %s", st.Terminated.ExitCode, st.Terminated.Reason)
		}
	}
	b.WriteString(")")
	return b.String()
}

func containerID(p *corev1.Pod) string {
	if len(p.Status.ContainerStatuses) == 0 {
		return ""
	}
	return p.Status.ContainerStatuses[0].ContainerID
}

func (s *stack) waitNodeReady(t *testing.T) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, "node Ready", func() (bool, string) {
		n, err := s.cs.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, c.Reason + ": " + c.Message
			}
		}
		return false, "no Ready condition"
	})
}

func (s *stack) create(t *testing.T, p *corev1.Pod) {
	t.Helper()
	if _, err := s.cs.CoreV1().Pods(namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create %s: %v", p.Name, err)
	}
}

// pods lists the test's pods by name.
func (s *stack) pods(t *testing.T, selector string) (map[string]*corev1.Pod, error) {
	list, err := s.cs.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	out := map[string]*corev1.Pod{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out, nil
}

// waitAllReady waits until every named pod is Running and Ready (and, when
// accept is given, accept holds for it).
func (s *stack) waitAllReady(t *testing.T, what string, names []string, timeout time.Duration, accept func(*corev1.Pod) bool) map[string]*corev1.Pod {
	t.Helper()
	var last map[string]*corev1.Pod
	testenv.Eventually(t, timeout, what, func() (bool, string) {
		pods, err := s.pods(t, "e2e=web")
		if err != nil {
			return false, err.Error()
		}
		last = pods
		var waiting []string
		for _, n := range names {
			p := pods[n]
			if p == nil || !runningReady(p) || (accept != nil && !accept(p)) {
				state := "missing"
				if p != nil {
					state = fmt.Sprintf("%s/ready=%s/%s", p.Status.Phase, podCondition(p, corev1.PodReady), containerID(p))
				}
				waiting = append(waiting, n+":"+state)
			}
		}
		return len(waiting) == 0, strings.Join(waiting, " ")
	})
	return last
}

func (s *stack) logsContain(t *testing.T, name, container, want string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "kubectl logs "+name, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		data, err := s.cs.CoreV1().Pods(namespace).GetLogs(name, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
		if err != nil {
			return false, err.Error()
		}
		return bytes.Contains(data, []byte(want)), string(data)
	})
}

// owners reads the podworkers' partition leases: partition -> replica id.
func (s *stack) owners(ctx context.Context) (map[int]string, error) {
	nc, err := s.natsConnect(natsURL)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, "splitlet_v1_"+bus.NodeToken(nodeName)+"_owners")
	if err != nil {
		return nil, err
	}
	out := map[int]string{}
	for p := 0; p < partitions; p++ {
		e, err := kv.Get(ctx, fmt.Sprintf("partition.%d", p))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(e.Value())); len(f) > 0 {
			out[p] = f[0]
		}
	}
	return out, nil
}

// replicaIDs maps the running podworkers containers to their replica ids.
func (s *stack) replicaIDs(t *testing.T) (map[string]string, error) {
	ids := map[string]string{}
	for _, c := range s.containers(t, "podworkers") {
		if state, _ := exec.Command("docker", "inspect", "--format", "{{.State.Running}}", c).Output(); strings.TrimSpace(string(state)) != "true" {
			continue
		}
		id, err := replicaID(c)
		if err != nil {
			return nil, err
		}
		ids[c] = id
	}
	return ids, nil
}

// holders maps each replica id to the pods whose partitions it owns.
func (s *stack) holders(ctx context.Context, pods map[string]*corev1.Pod) (map[string][]string, map[int]string, error) {
	own, err := s.owners(ctx)
	if err != nil {
		return nil, nil, err
	}
	out := map[string][]string{}
	for name, p := range pods {
		o := own[bus.Partition(string(p.UID), partitions)]
		out[o] = append(out[o], name)
	}
	for _, names := range out {
		sort.Strings(names)
	}
	return out, own, nil
}

// checkPodsOnStack is the end-to-end scenario: pods with tcpSocket
// readiness and liveness probes on the process runtime reach Running and
// Ready; kubectl logs returns their output; a liveness failure restarts a
// container; with several podworkers replicas each owns some pods, and
// killing one replica's container moves its pods to the others, where they
// run again; kubectl delete pod finishes.
func checkPodsOnStack(t *testing.T, s *stack, replicas int) {
	ctx := context.Background()
	s.waitNodeReady(t)

	s.create(t, flakyPod("flaky", flakyPort))
	initial := 3
	if replicas > 1 {
		initial = 4 * replicas
	}
	var names []string
	addWeb := func() {
		i := len(names)
		name := fmt.Sprintf("web-%d", i)
		s.create(t, webPod(name, int32(firstPort+i)))
		names = append(names, name)
	}
	for range initial {
		addWeb()
	}
	pods := s.waitAllReady(t, fmt.Sprintf("%d pods Running and Ready", len(names)), names, 3*time.Minute, nil)
	for _, n := range names {
		s.logsContain(t, n, "web", "hello from "+n)
	}

	testenv.Eventually(t, 90*time.Second, "flaky restarted after its liveness probe failed", func() (bool, string) {
		p, err := s.cs.CoreV1().Pods(namespace).Get(ctx, "flaky", metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false, fmt.Sprint(err)
		}
		return p.Status.ContainerStatuses[0].RestartCount >= 1, fmt.Sprintf("restarts %d", p.Status.ContainerStatuses[0].RestartCount)
	})
	s.logsContain(t, "flaky", "flaky", "flaky up")

	if replicas > 1 {
		ids, err := s.replicaIDs(t)
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) < replicas {
			// docker compose up --scale podworkers=N on the running stack:
			// the new replicas take their share of the partitions, and the
			// pods of those partitions start again on them.
			pods, ids = s.converge(t, names, fmt.Sprintf("scaled from %d to %d replicas", len(ids), replicas), replicas, "", func() { s.scale(t, replicas) })
		}
		// Each replica owns some pods: more pods until it does.
		// (Rendezvous hashing may leave a replica no partition at all, about
		// one run in two hundred: it cannot own a pod, and is not waited for.)
		var byReplica map[string][]string
		for {
			var own map[int]string
			if byReplica, own, err = s.holders(context.Background(), pods); err != nil {
				t.Fatalf("owners bucket: %v", err)
			}
			holding := map[string]bool{}
			for _, id := range own {
				holding[id] = true
			}
			missing := 0
			for _, id := range ids {
				if holding[id] && len(byReplica[id]) == 0 {
					missing++
				}
			}
			if missing == 0 {
				break
			}
			if len(names) >= maxWeb {
				t.Fatalf("with %d pods some replica owns none: %v (replicas %v)", len(names), byReplica, ids)
			}
			addWeb()
			pods = s.waitAllReady(t, fmt.Sprintf("%d pods Running and Ready", len(names)), names, 2*time.Minute, nil)
		}
		for c, id := range ids {
			t.Logf("replica %s (container %.12s) owns %v", id, c, byReplica[id])
		}

		// Kill the replica holding the most pods: they move to the others.
		var victim, victimID string
		for c, id := range ids {
			if victim == "" || len(byReplica[id]) > len(byReplica[victimID]) {
				victim, victimID = c, id
			}
		}
		moved := byReplica[victimID]
		pods, _ = s.converge(t, names, fmt.Sprintf("pods %v of the killed replica %s running on the others", moved, victimID), 0, victimID, func() {
			if out, err := exec.Command("docker", "kill", victim).CombinedOutput(); err != nil {
				t.Fatalf("docker kill: %v: %s", err, out)
			}
		})
		for _, n := range moved {
			s.logsContain(t, n, "web", "hello from "+n)
		}
	}

	// kubectl delete pod: every pod goes.
	all := append([]string{"flaky"}, names...)
	for _, n := range all {
		if err := s.cs.CoreV1().Pods(namespace).Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete %s: %v", n, err)
		}
	}
	testenv.Eventually(t, 2*time.Minute, "pods gone after delete", func() (bool, string) {
		var left []string
		for _, n := range all {
			if _, err := s.cs.CoreV1().Pods(namespace).Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left = append(left, n)
			}
		}
		return len(left) == 0, strings.Join(left, " ")
	})
}

// converge runs action (a scale or a kill) and waits until the pods settle:
// every pod's partition is owned by a running replica (never by gone, the
// killed one), with want replicas running when want > 0, each holding some
// partition; every pod is Running and Ready, and every pod whose owner
// changed has a new container (it really started again on its new owner).
func (s *stack) converge(t *testing.T, names []string, what string, want int, gone string, action func()) (map[string]*corev1.Pod, map[string]string) {
	t.Helper()
	ctx := context.Background()
	before, err := s.pods(t, "e2e=web")
	if err != nil {
		t.Fatal(err)
	}
	byBefore, _, err := s.holders(ctx, before)
	if err != nil {
		t.Fatal(err)
	}
	action()
	var pods map[string]*corev1.Pod
	var ids map[string]string
	testenv.Eventually(t, 3*time.Minute, what, func() (bool, string) {
		var err error
		if ids, err = s.replicaIDs(t); err != nil {
			return false, err.Error()
		}
		live := map[string]bool{}
		for _, id := range ids {
			live[id] = id != gone
		}
		if want > 0 && len(ids) != want {
			return false, fmt.Sprintf("%d replicas running", len(ids))
		}
		if pods, err = s.pods(t, "e2e=web"); err != nil {
			return false, err.Error()
		}
		by, own, err := s.holders(ctx, pods)
		if err != nil {
			return false, err.Error()
		}
		holding := map[string]bool{}
		for p := 0; p < partitions; p++ {
			if !live[own[p]] {
				return false, fmt.Sprintf("partition %d owned by %q (live %v)", p, own[p], ids)
			}
			holding[own[p]] = true
		}
		if want > 0 && len(holding) != want {
			return false, fmt.Sprintf("partitions held by %d replicas", len(holding))
		}
		var waiting []string
		for _, n := range names {
			p := pods[n]
			if p == nil || !runningReady(p) {
				waiting = append(waiting, n+" not ready"+notReadyWhy(p))
				continue
			}
			if o := ownerOf(by, n); o != ownerOf(byBefore, n) && containerID(p) == containerID(before[n]) {
				waiting = append(waiting, fmt.Sprintf("%s moved to %s, still container %s", n, o, containerID(p)))
			}
		}
		return len(waiting) == 0, strings.Join(waiting, "; ")
	})
	by, _, _ := s.holders(ctx, pods)
	for n := range pods {
		if o, b := ownerOf(by, n), ownerOf(byBefore, n); o != b {
			t.Logf("%s moved from %s to %s", n, b, o)
		}
	}
	return pods, ids
}

func ownerOf(by map[string][]string, pod string) string {
	for id, names := range by {
		for _, n := range names {
			if n == pod {
				return id
			}
		}
	}
	return ""
}
