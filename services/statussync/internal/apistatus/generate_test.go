package apistatus

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
)

type probeMap map[string]bus.ProbeOutcome

func (p probeMap) Result(id string, t bus.ProbeType) (bus.ProbeOutcome, bool) {
	r, ok := p[id+"/"+string(t)]
	return r, ok
}

func pod(policy corev1.RestartPolicy, containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", Generation: 1},
		Spec:       corev1.PodSpec{RestartPolicy: policy, Containers: containers},
	}
}

func running(name, id string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, ContainerID: id, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}
}

func terminated(name, id string, code int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, ContainerID: id, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}
}

func waiting(name string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: ReasonContainerCreating}}}
}

func cond(s corev1.PodStatus, t corev1.PodConditionType) *corev1.PodCondition {
	return findCondition(s.Conditions, t)
}

func TestPhase(t *testing.T) {
	c := corev1.Container{Name: "a"}
	d := corev1.Container{Name: "b"}
	cases := []struct {
		name     string
		policy   corev1.RestartPolicy
		statuses []corev1.ContainerStatus
		terminal bool
		want     corev1.PodPhase
	}{
		{"no status", corev1.RestartPolicyAlways, nil, false, corev1.PodPending},
		{"waiting", corev1.RestartPolicyAlways, []corev1.ContainerStatus{waiting("a"), running("b", "x")}, false, corev1.PodPending},
		{"running", corev1.RestartPolicyAlways, []corev1.ContainerStatus{running("a", "x"), running("b", "y")}, false, corev1.PodRunning},
		{"one unknown", corev1.RestartPolicyAlways, []corev1.ContainerStatus{running("a", "x")}, false, corev1.PodPending},
		{"always restarts", corev1.RestartPolicyAlways, []corev1.ContainerStatus{terminated("a", "x", 1), terminated("b", "y", 0)}, false, corev1.PodRunning},
		{"always but terminal", corev1.RestartPolicyAlways, []corev1.ContainerStatus{terminated("a", "x", 0), terminated("b", "y", 0)}, true, corev1.PodSucceeded},
		{"never succeeded", corev1.RestartPolicyNever, []corev1.ContainerStatus{terminated("a", "x", 0), terminated("b", "y", 0)}, false, corev1.PodSucceeded},
		{"never failed", corev1.RestartPolicyNever, []corev1.ContainerStatus{terminated("a", "x", 0), terminated("b", "y", 2)}, false, corev1.PodFailed},
		{"onfailure restarting", corev1.RestartPolicyOnFailure, []corev1.ContainerStatus{terminated("a", "x", 0), terminated("b", "y", 2)}, false, corev1.PodRunning},
		{"onfailure done", corev1.RestartPolicyOnFailure, []corev1.ContainerStatus{terminated("a", "x", 0), terminated("b", "y", 0)}, false, corev1.PodSucceeded},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Phase(pod(tc.policy, c, d), tc.statuses, tc.terminal, false, false)
			if got != tc.want {
				t.Fatalf("phase %s, want %s", got, tc.want)
			}
		})
	}
}

func TestPhaseInitContainers(t *testing.T) {
	p := pod(corev1.RestartPolicyNever, corev1.Container{Name: "a"})
	p.Spec.InitContainers = []corev1.Container{{Name: "init"}}
	if got := Phase(p, []corev1.ContainerStatus{running("init", "i"), waiting("a")}, false, false, false); got != corev1.PodPending {
		t.Fatalf("init running: %s", got)
	}
	if got := Phase(p, []corev1.ContainerStatus{terminated("init", "i", 3), waiting("a")}, false, false, false); got != corev1.PodFailed {
		t.Fatalf("init failed under Never: %s", got)
	}
	if got := Phase(p, []corev1.ContainerStatus{terminated("init", "i", 0), running("a", "x")}, false, true, false); got != corev1.PodRunning {
		t.Fatalf("init done, app running: %s", got)
	}
}

func TestGenerateReadinessFromProbes(t *testing.T) {
	p := pod(corev1.RestartPolicyAlways,
		corev1.Container{Name: "a", ReadinessProbe: &corev1.Probe{}},
		corev1.Container{Name: "b", StartupProbe: &corev1.Probe{}})
	rs := &bus.PodRuntimeStatus{UID: "u1", Name: "p", Namespace: "ns", PodIP: "10.0.0.1",
		ContainerStatuses: []corev1.ContainerStatus{running("a", "sim://a"), running("b", "sim://b")}}
	// The runtime's own ready/started values are ignored.
	rs.ContainerStatuses[0].Ready = true
	gen := func(pr probeMap) corev1.PodStatus {
		return Generate(Input{Pod: p, Runtime: rs, Probes: pr})
	}
	s := gen(nil)
	if s.Phase != corev1.PodRunning {
		t.Fatalf("phase %s", s.Phase)
	}
	if a := findStatus(s.ContainerStatuses, "a"); a.Ready || !*a.Started {
		t.Fatalf("a: ready %v started %v; want not ready (probe pending), started", a.Ready, *a.Started)
	}
	if b := findStatus(s.ContainerStatuses, "b"); b.Ready || *b.Started {
		t.Fatalf("b: ready %v started %v; want neither before the startup probe", b.Ready, *b.Started)
	}
	if c := cond(s, corev1.PodReady); c.Status != corev1.ConditionFalse || c.Reason != ReasonContainersNotReady {
		t.Fatalf("Ready %+v", c)
	}
	s = gen(probeMap{"sim://a/Readiness": bus.ProbeSuccess, "sim://b/Startup": bus.ProbeSuccess})
	if c := cond(s, corev1.PodReady); c.Status != corev1.ConditionTrue {
		t.Fatalf("Ready %+v", c)
	}
	if c := cond(s, corev1.ContainersReady); c.Status != corev1.ConditionTrue {
		t.Fatalf("ContainersReady %+v", c)
	}
	// A result for another container instance does not count.
	s = gen(probeMap{"sim://old/Readiness": bus.ProbeSuccess, "sim://b/Startup": bus.ProbeSuccess})
	if c := cond(s, corev1.PodReady); c.Status != corev1.ConditionFalse {
		t.Fatalf("Ready from a stale container's probe: %+v", c)
	}
	// b has no readiness probe: a readiness result for it (the API object
	// said not ready while its startup probe ran) does not hold it back
	// once started (the conformance lifecycle hook specs' sidecar).
	s = gen(probeMap{"sim://a/Readiness": bus.ProbeSuccess, "sim://b/Startup": bus.ProbeSuccess, "sim://b/Readiness": bus.ProbeFailure})
	if b := findStatus(s.ContainerStatuses, "b"); !b.Ready {
		t.Fatalf("b without a readiness probe, started: not ready")
	}
	if s.PodIP != "10.0.0.1" || len(s.PodIPs) != 1 || s.QOSClass != corev1.PodQOSBestEffort {
		t.Fatalf("podIP %q podIPs %v qos %s", s.PodIP, s.PodIPs, s.QOSClass)
	}
}

func TestReadinessGates(t *testing.T) {
	p := pod(corev1.RestartPolicyAlways, corev1.Container{Name: "a"})
	p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/lb"}}
	rs := &bus.PodRuntimeStatus{UID: "u1", ContainerStatuses: []corev1.ContainerStatus{running("a", "sim://a")}}
	s := Generate(Input{Pod: p, Runtime: rs})
	if c := cond(s, corev1.PodReady); c.Status != corev1.ConditionFalse || c.Reason != ReasonReadinessGatesNotReady {
		t.Fatalf("Ready without the gate's condition: %+v", c)
	}
	api := corev1.PodStatus{Conditions: []corev1.PodCondition{
		{Type: "example.com/lb", Status: corev1.ConditionTrue},
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
	}}
	s = Generate(Input{Pod: p, Runtime: rs, API: api, Old: api})
	if c := cond(s, corev1.PodReady); c.Status != corev1.ConditionTrue {
		t.Fatalf("Ready with the gate True: %+v", c)
	}
	if cond(s, corev1.PodScheduled) == nil || cond(s, "example.com/lb") == nil {
		t.Fatal("foreign conditions were not kept")
	}
}

func TestRejectedAndEvicted(t *testing.T) {
	p := pod(corev1.RestartPolicyAlways, corev1.Container{Name: "a"})
	rs := &bus.PodRuntimeStatus{UID: "u1", Phase: corev1.PodFailed, Reason: "OutOfcpu", Message: "Node didn't have enough resource: cpu", Terminated: true}
	s := Generate(Input{Pod: p, Runtime: rs})
	if s.Phase != corev1.PodFailed || s.Reason != "OutOfcpu" || !strings.HasPrefix(s.Message, "Pod was rejected: ") {
		t.Fatalf("rejected: %s %s %q", s.Phase, s.Reason, s.Message)
	}
	rs = &bus.PodRuntimeStatus{UID: "u1", Phase: corev1.PodFailed, Reason: "Evicted", Message: "low on memory",
		ContainerStatuses: []corev1.ContainerStatus{terminated("a", "sim://a", 137)}, Terminated: true}
	s = Generate(Input{Pod: p, Runtime: rs})
	if s.Phase != corev1.PodFailed || s.Reason != "Evicted" || s.Message != "low on memory" {
		t.Fatalf("evicted: %s %s %q", s.Phase, s.Reason, s.Message)
	}
	if c := cond(s, corev1.PodReady); c.Status != corev1.ConditionFalse || c.Reason != ReasonPodFailed {
		t.Fatalf("Ready of a failed pod: %+v", c)
	}
}

// An evicted pod's DisruptionTarget condition reaches the API status in
// place of an earlier one of its type, keeping the transition time of an
// unchanged status; a worker's Ready condition is ignored.
func TestWorkerConditions(t *testing.T) {
	p := pod(corev1.RestartPolicyAlways, corev1.Container{Name: "a"})
	at := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	dt := corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: corev1.PodReasonTerminationByKubelet,
		Message: "low on memory", LastTransitionTime: metav1.Now().Rfc3339Copy()}
	rs := &bus.PodRuntimeStatus{UID: "u1", Phase: corev1.PodFailed, Reason: "Evicted", Message: "low on memory", Terminating: true,
		ContainerStatuses: []corev1.ContainerStatus{running("a", "sim://a")},
		Conditions:        []corev1.PodCondition{dt, {Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	s := Generate(Input{Pod: p, Runtime: rs})
	if c := cond(s, corev1.DisruptionTarget); c == nil || c.Status != corev1.ConditionTrue || c.Reason != "TerminationByKubelet" || c.Message != "low on memory" {
		t.Fatalf("DisruptionTarget: %+v", c)
	}
	if c := cond(s, corev1.PodReady); c.Status != corev1.ConditionFalse {
		t.Fatalf("the worker set Ready: %+v", c)
	}
	api := corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, LastTransitionTime: at, Reason: "EvictionByEvictionAPI"},
		{Type: "example.com/gate", Status: corev1.ConditionTrue}}}
	s = Generate(Input{Pod: p, Runtime: rs, API: api})
	n := 0
	for _, c := range s.Conditions {
		if c.Type == corev1.DisruptionTarget {
			n++
		}
	}
	c := cond(s, corev1.DisruptionTarget)
	if n != 1 || c.Reason != "TerminationByKubelet" || !c.LastTransitionTime.Equal(&at) || cond(s, "example.com/gate") == nil {
		t.Fatalf("%d DisruptionTarget conditions, %+v; conditions %+v", n, c, s.Conditions)
	}
}

func TestTerminalPhaseSticks(t *testing.T) {
	p := pod(corev1.RestartPolicyAlways, corev1.Container{Name: "a"})
	rs := &bus.PodRuntimeStatus{UID: "u1", ContainerStatuses: []corev1.ContainerStatus{running("a", "sim://a")}}
	s := Generate(Input{Pod: p, Runtime: rs, API: corev1.PodStatus{Phase: corev1.PodFailed}})
	if s.Phase != corev1.PodFailed {
		t.Fatalf("phase left the API's terminal phase: %s", s.Phase)
	}
}

func TestTerminatedMarksUnknownContainers(t *testing.T) {
	p := pod(corev1.RestartPolicyAlways, corev1.Container{Name: "a"}, corev1.Container{Name: "b"})
	rs := &bus.PodRuntimeStatus{UID: "u1", Terminating: true, Terminated: true,
		ContainerStatuses: []corev1.ContainerStatus{terminated("a", "sim://a", 0)}}
	old := corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{running("a", "sim://a"), running("b", "sim://b")}}
	s := Generate(Input{Pod: p, Runtime: rs, Old: old})
	b := findStatus(s.ContainerStatuses, "b")
	if b.State.Terminated == nil || b.State.Terminated.Reason != ReasonContainerStatusUnknown {
		t.Fatalf("b: %+v", b.State)
	}
	if s.Phase != corev1.PodFailed {
		t.Fatalf("phase %s", s.Phase)
	}
}

func TestCheckTransition(t *testing.T) {
	old := corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{terminated("a", "x", 0)}}
	next := corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{running("a", "y")}}
	for _, tc := range []struct {
		policy corev1.RestartPolicy
		code   int32
		ok     bool
	}{
		{corev1.RestartPolicyNever, 0, false},
		{corev1.RestartPolicyNever, 1, false},
		{corev1.RestartPolicyOnFailure, 0, false},
		{corev1.RestartPolicyOnFailure, 1, true},
		{corev1.RestartPolicyAlways, 0, true},
	} {
		old.ContainerStatuses[0].State.Terminated.ExitCode = tc.code
		err := CheckTransition(&old, &next, &pod(tc.policy).Spec)
		if (err == nil) != tc.ok {
			t.Errorf("%s exit %d: err %v", tc.policy, tc.code, err)
		}
	}
}

func TestPrepareKeepsTimes(t *testing.T) {
	p := pod(corev1.RestartPolicyAlways, corev1.Container{Name: "a"})
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	old := corev1.PodStatus{StartTime: &t0, Conditions: []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: t0},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: t0},
	}}
	later := metav1.NewTime(t1.Add(time.Minute))
	next := corev1.PodStatus{StartTime: &later, Conditions: []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue},
	}}
	Prepare(p, &old, &next, t1)
	if !next.StartTime.Equal(&t0) {
		t.Fatalf("start time %v, want the first %v", next.StartTime, t0)
	}
	if c := cond(next, corev1.PodReady); !c.LastTransitionTime.Equal(&t1) {
		t.Fatalf("Ready changed status, transition time %v want %v", c.LastTransitionTime, t1)
	}
	if c := cond(next, corev1.PodInitialized); !c.LastTransitionTime.Equal(&t0) {
		t.Fatalf("Initialized unchanged, transition time %v want %v", c.LastTransitionTime, t0)
	}
}

// DisruptionTarget goes to the API server with the terminal phase, once no
// container can run (kubelet: mergePodStatus), and replaces the API's.
func TestMergeSharedCondition(t *testing.T) {
	p := pod(corev1.RestartPolicyAlways, corev1.Container{Name: "a"})
	api := corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
		{Type: corev1.DisruptionTarget, Status: corev1.ConditionFalse, Reason: "Old"},
	}}
	next := corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Conditions: []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionFalse},
		{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: corev1.PodReasonTerminationByKubelet},
	}}
	if c := cond(Merge(p, api, next, true), corev1.DisruptionTarget); c == nil || c.Reason != "Old" {
		t.Fatalf("sent while containers may run: %+v", c)
	}
	m := Merge(p, api, next, false)
	n := 0
	for _, c := range m.Conditions {
		if c.Type == corev1.DisruptionTarget {
			n++
		}
	}
	if c := cond(m, corev1.DisruptionTarget); n != 1 || c.Status != corev1.ConditionTrue || c.Reason != "TerminationByKubelet" || c.LastTransitionTime.IsZero() {
		t.Fatalf("%d DisruptionTarget conditions, %+v", n, c)
	}
	api.Phase = corev1.PodFailed
	if c := cond(Merge(p, api, next, false), corev1.DisruptionTarget); c.Reason != "Old" {
		t.Fatalf("sent after the terminal phase: %+v", c)
	}
}

func TestMergeAndPatch(t *testing.T) {
	p := pod(corev1.RestartPolicyAlways, corev1.Container{Name: "a"})
	api := corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue},
	}}
	next := corev1.PodStatus{Phase: corev1.PodFailed, Conditions: []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionTrue},
	}}
	m := Merge(p, api, next, true)
	if m.Phase != corev1.PodRunning {
		t.Fatalf("terminal phase written while containers may run: %s", m.Phase)
	}
	if cond(m, corev1.PodScheduled) == nil {
		t.Fatal("PodScheduled dropped")
	}
	m = Merge(p, api, next, false)
	if m.Phase != corev1.PodFailed || cond(m, corev1.PodReady).Status != corev1.ConditionFalse {
		t.Fatalf("phase %s Ready %+v", m.Phase, cond(m, corev1.PodReady))
	}
	patch, unchanged, err := StatusPatch("u1", api, m)
	if err != nil || unchanged {
		t.Fatalf("patch %s unchanged %v err %v", patch, unchanged, err)
	}
	if !strings.Contains(string(patch), `"uid":"u1"`) || !strings.Contains(string(patch), `"phase":"Failed"`) {
		t.Fatalf("patch %s", patch)
	}
	if _, unchanged, _ := StatusPatch("u1", api, api); !unchanged {
		t.Fatal("equal statuses gave a patch")
	}
}

func TestMalformedIPKeepsPrevious(t *testing.T) {
	p := pod(corev1.RestartPolicyAlways, corev1.Container{Name: "a"})
	rs := &bus.PodRuntimeStatus{UID: "u1", PodIP: "10.0.0.300", HostIP: "not-an-ip",
		ContainerStatuses: []corev1.ContainerStatus{running("a", "sim://a")}}
	s := Generate(Input{Pod: p, Runtime: rs, Old: corev1.PodStatus{PodIP: "10.0.0.3"}})
	if s.PodIP != "10.0.0.3" || s.HostIP != "" || len(s.HostIPs) != 0 {
		t.Fatalf("podIP %q hostIP %q hostIPs %v", s.PodIP, s.HostIP, s.HostIPs)
	}
}
