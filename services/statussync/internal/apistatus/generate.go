// Package apistatus builds the API PodStatus of a pod from what the bus
// carries (the pod's spec, the runtime status from the pod workers and the
// probe results), with the kubelet's rules: the phase (getPhase), the
// conditions it owns, container readiness from probes (the prober manager's
// UpdatePodStatus), and the rules the status manager applies before a status
// is cached and written (state transitions, transition times, normalisation,
// merging with the API copy, the strategic merge patch).
//
// Everything here is pure: no clients, no clocks other than metav1.Now where
// the kubelet stamps a time.
package apistatus

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/kube"
)

// Reasons and messages the kubelet writes into pod status.
const (
	ReasonContainerCreating        = "ContainerCreating"
	ReasonPodInitializing          = "PodInitializing"
	ReasonContainerStatusUnknown   = "ContainerStatusUnknown"
	ReasonUnknownContainerStatuses = "UnknownContainerStatuses"
	ReasonPodCompleted             = "PodCompleted"
	ReasonPodFailed                = "PodFailed"
	ReasonContainersNotReady       = "ContainersNotReady"
	ReasonContainersNotInitialized = "ContainersNotInitialized"
	ReasonReadinessGatesNotReady   = "ReadinessGatesNotReady"
	rejectedPrefix                 = "Pod was rejected: "
)

// Probes answers the latest result of a probe of a container instance.
type Probes interface {
	// Result of the probe of the given type for the container instance
	// (its container ID); false when no result was received yet.
	Result(containerID string, probe bus.ProbeType) (bus.ProbeOutcome, bool)
}

// Input is everything a status is generated from.
type Input struct {
	// Pod is the desired pod (spec, generation), from the bus or the API.
	Pod *corev1.Pod
	// Runtime is the latest runtime status from the pod workers.
	Runtime *bus.PodRuntimeStatus
	// Probes holds the prober's results; nil means none received.
	Probes Probes
	// Old is the status manager's cached status for the pod or, when there
	// is none, the API copy's status (kubelet: generateAPIPodStatus).
	Old corev1.PodStatus
	// API is the status of the API copy (the mirror pod for a static pod).
	API corev1.PodStatus
	// Static is true for pods from a file or HTTP source.
	Static bool
}

// Rejected reports whether a runtime status is an admission rejection: the
// worker failed the pod before any container existed.
func Rejected(rs *bus.PodRuntimeStatus) bool {
	return rs.Phase == corev1.PodFailed && len(rs.ContainerStatuses) == 0 && len(rs.InitContainerStatuses) == 0
}

// Terminal reports whether the pod's containers will not run again: the
// worker says every container stopped, or it is tearing the pod down and
// nothing runs any more.
func Terminal(rs *bus.PodRuntimeStatus) bool {
	if rs.Terminated {
		return true
	}
	if !rs.Terminating {
		return false
	}
	for _, s := range append(slices.Clone(rs.InitContainerStatuses), rs.ContainerStatuses...) {
		if s.State.Running != nil {
			return false
		}
	}
	return true
}

// AllStopped reports whether the runtime shows containers and every one of
// them terminated: nothing of the pod runs or is about to start.
func AllStopped(rs *bus.PodRuntimeStatus) bool {
	n := 0
	for _, s := range append(slices.Clone(rs.InitContainerStatuses), rs.ContainerStatuses...) {
		if s.State.Terminated == nil {
			return false
		}
		n++
	}
	return n > 0
}

// Generate builds the pod's API status (kubelet: generateAPIPodStatus).
// The caller then passes it through the status manager's rules (Prepare).
func Generate(in Input) corev1.PodStatus {
	if Rejected(in.Runtime) && len(in.Old.ContainerStatuses) == 0 {
		return rejectedStatus(in)
	}
	s := runtimeStatus(in)
	decidePhase(in, &s)
	if in.Runtime.Terminated {
		terminate(in.Pod, &s, in.Static)
	}
	applyProbes(in.Pod, &s, in.Probes)
	s.Conditions = conditions(in, &s)
	return s
}

// rejectedStatus is a pod refused at admission (kubelet rejectPod): phase,
// reason and message only.
func rejectedStatus(in Input) corev1.PodStatus {
	msg := in.Runtime.Message
	if !strings.HasPrefix(msg, rejectedPrefix) {
		msg = rejectedPrefix + msg
	}
	return corev1.PodStatus{
		Phase:      corev1.PodFailed,
		Reason:     in.Runtime.Reason,
		Message:    msg,
		QOSClass:   qosOf(in.Pod, in.API),
		Conditions: append(foreignConditions(in.API.Conditions), scheduledCondition(in.Pod)),
	}
}

// runtimeStatus is what the runtime status says of the pod: its addresses,
// start time, QoS class and its containers' statuses.
func runtimeStatus(in Input) corev1.PodStatus {
	pod, rs := in.Pod, in.Runtime
	s := corev1.PodStatus{
		HostIP:             ipOr(rs.HostIP, in.Old.HostIP),
		PodIP:              ipOr(rs.PodIP, in.Old.PodIP),
		StartTime:          rs.StartTime.DeepCopy(),
		QOSClass:           qosOf(pod, in.API),
		ObservedGeneration: pod.Generation,
	}
	if s.HostIP != "" {
		s.HostIPs = []corev1.HostIP{{IP: s.HostIP}}
	}
	if s.PodIP != "" {
		s.PodIPs = []corev1.PodIP{{IP: s.PodIP}}
	}
	hasInit := len(pod.Spec.InitContainers) > 0
	s.InitContainerStatuses = containerStatuses(pod.Spec.InitContainers, rs.InitContainerStatuses, in.Old.InitContainerStatuses, hasInit, pod.DeletionTimestamp != nil)
	s.ContainerStatuses = containerStatuses(pod.Spec.Containers, rs.ContainerStatuses, in.Old.ContainerStatuses, hasInit, pod.DeletionTimestamp != nil)
	if n := len(pod.Spec.EphemeralContainers); n > 0 {
		// kubelet: ephemeral containers are shown as containers are, and
		// take no part in the phase.
		specs := make([]corev1.Container, n)
		for i := range pod.Spec.EphemeralContainers {
			specs[i] = corev1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		}
		s.EphemeralContainerStatuses = containerStatuses(specs, rs.EphemeralContainerStatuses, in.Old.EphemeralContainerStatuses, false, pod.DeletionTimestamp != nil)
	}
	return s
}

// decidePhase sets the phase, reason and message from the containers, the
// cached and API statuses and the worker's own decision.
func decidePhase(in Input, s *corev1.PodStatus) {
	pod, rs := in.Pod, in.Runtime
	all := append(slices.Clone(s.ContainerStatuses), s.InitContainerStatuses...)
	s.Phase = Phase(pod, all, Terminal(rs), anyRegularRunning(pod, rs.ContainerStatuses), in.Static)
	// A terminal phase, once reached in the cache or in the API, stays.
	if !terminalPhase(s.Phase) {
		switch {
		case terminalPhase(in.Old.Phase):
			s.Phase = in.Old.Phase
		case terminalPhase(in.API.Phase):
			s.Phase = in.API.Phase
		}
	}
	// kubelet: keep the reason and message that belong to an unchanged phase.
	if s.Phase == in.Old.Phase {
		s.Reason, s.Message = in.Old.Reason, in.Old.Message
		if s.Reason == "" {
			s.Reason = in.API.Reason
		}
		if s.Message == "" {
			s.Message = in.API.Message
		}
	}
	// The worker decided the phase outright (eviction).
	if rs.Phase != "" {
		s.Phase, s.Reason, s.Message = rs.Phase, rs.Reason, rs.Message
	}
	if terminalPhase(in.API.Phase) && s.Phase != in.API.Phase {
		// kubelet: no transition out of a terminal phase shown by the API.
		s.Phase = in.API.Phase
	}
}

// conditions are the pod's conditions: the foreign ones the API holds with
// the worker's shared ones set on them, then the kubelet's own.
func conditions(in Input, s *corev1.PodStatus) []corev1.PodCondition {
	pod := in.Pod
	cs := workerConditions(foreignConditions(in.API.Conditions), in.Runtime.Conditions)
	allStatuses := append(slices.Clone(s.InitContainerStatuses), s.ContainerStatuses...)
	cs = append(cs,
		readyToStartCondition(pod, in.Runtime),
		initializedCondition(pod, allStatuses, s.Phase),
	)
	return append(cs,
		podReadyCondition(pod, cs, allStatuses, s.Phase),
		containersReadyCondition(pod, allStatuses, s.Phase),
		scheduledCondition(pod),
	)
}

// scheduledCondition: the pod is on this node (kubelet: generateAPIPodStatus
// always sets PodScheduled True).
func scheduledCondition(pod *corev1.Pod) corev1.PodCondition {
	return corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, ObservedGeneration: pod.Generation}
}

// ValidIP reports whether s is an IP address the API server takes.
func ValidIP(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Zone() == "" && a.String() == s
}

// ipOr is ip when it is valid; a malformed one (which the API server would
// refuse, failing the whole write) keeps the previous value.
func ipOr(ip, previous string) string {
	if ip == "" || ValidIP(ip) {
		return ip
	}
	if ValidIP(previous) {
		return previous
	}
	return ""
}

// terminate gives every container a final state once the worker reports the
// pod's containers stopped for good (kubelet: TerminatePod).
func terminate(pod *corev1.Pod, s *corev1.PodStatus, static bool) {
	unknown := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		Reason:   ReasonContainerStatusUnknown,
		Message:  "The container could not be located when the pod was terminated",
		ExitCode: 137,
	}}
	if podInitialized(pod, s) {
		for i := range s.ContainerStatuses {
			if s.ContainerStatuses[i].State.Terminated == nil {
				s.ContainerStatuses[i].State = unknown
			}
		}
	}
	// Init containers that show evidence of a start (all but the trailing
	// waiting ones) and did not end are failures.
	last := -1
	for i, c := range s.InitContainerStatuses {
		if c.State.Waiting == nil {
			last = i
		}
	}
	for i := 0; i <= last; i++ {
		if s.InitContainerStatuses[i].State.Terminated == nil {
			s.InitContainerStatuses[i].State = unknown
		}
	}
	// kubelet: static pods keep a non-terminal phase (#116484).
	if !static && !terminalPhase(s.Phase) {
		s.Phase = corev1.PodFailed
	}
}

// podInitialized: kubelet hasPodInitialized.
func podInitialized(pod *corev1.Pod, s *corev1.PodStatus) bool {
	if len(pod.Spec.InitContainers) == 0 {
		return true
	}
	for _, c := range s.ContainerStatuses {
		if c.LastTerminationState.Terminated != nil || c.State.Waiting == nil {
			return true
		}
	}
	if n := len(s.InitContainerStatuses); n > 0 {
		c := s.InitContainerStatuses[n-1]
		spec := findContainer(pod.Spec.InitContainers, c.Name)
		if spec != nil && restartableInit(spec) {
			return c.State.Running != nil && c.Started != nil && *c.Started
		}
		for _, t := range []*corev1.ContainerStateTerminated{c.LastTerminationState.Terminated, c.State.Terminated} {
			if t != nil && t.ExitCode == 0 {
				return true
			}
		}
	}
	return false
}

// containerStatuses builds one status per container of the spec, in spec
// order: the runtime's where it has one, otherwise the default waiting state
// with what the previous status knew (kubelet: convertToAPIContainerStatuses).
func containerStatuses(specs []corev1.Container, runtime, old []corev1.ContainerStatus, hasInit, deleting bool) []corev1.ContainerStatus {
	if len(specs) == 0 {
		return nil
	}
	waiting := ReasonContainerCreating
	if hasInit {
		waiting = ReasonPodInitializing
	}
	out := make([]corev1.ContainerStatus, 0, len(specs))
	for i := range specs {
		c := &specs[i]
		prev := findStatus(old, c.Name)
		if r := findStatus(runtime, c.Name); r != nil {
			st := corev1.ContainerStatus{
				Name:                 c.Name,
				State:                *r.State.DeepCopy(),
				LastTerminationState: *r.LastTerminationState.DeepCopy(),
				RestartCount:         r.RestartCount,
				Image:                r.Image,
				ImageID:              r.ImageID,
				ContainerID:          r.ContainerID,
				AllocatedResources:   r.AllocatedResources.DeepCopy(),
				Resources:            r.Resources.DeepCopy(),
				User:                 r.User.DeepCopy(),
				VolumeMounts:         volumeMounts(r.VolumeMounts),
			}
			if st.Image == "" {
				st.Image = c.Image
			}
			if prev != nil && prev.RestartCount > st.RestartCount {
				st.RestartCount = prev.RestartCount
			}
			out = append(out, st)
			continue
		}
		st := corev1.ContainerStatus{
			Name:  c.Name,
			Image: c.Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waiting}},
		}
		if prev != nil {
			if prev.State.Terminated != nil {
				// The final state of a container the runtime forgot stays.
				st = *prev.DeepCopy()
				st.Ready, st.Started = false, nil
				out = append(out, st)
				continue
			}
			st.RestartCount = prev.RestartCount
			st.LastTerminationState = *prev.LastTerminationState.DeepCopy()
			if prev.State.Running != nil && st.LastTerminationState.Terminated == nil {
				// kubelet: a running container that vanished is shown as
				// stopped, so the pod does not fall back to Pending.
				st.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{
					Reason:   ReasonContainerStatusUnknown,
					Message:  "The container could not be located when the pod was deleted.  The container used to be Running",
					ExitCode: 137,
				}
				if !deleting {
					st.RestartCount++
				}
			}
		}
		out = append(out, st)
	}
	return out
}

// applyProbes sets started and ready from the probe results, never from the
// runtime (kubelet: prober manager UpdatePodStatus).
func applyProbes(pod *corev1.Pod, s *corev1.PodStatus, probes Probes) {
	result := func(id string, t bus.ProbeType) (bus.ProbeOutcome, bool) {
		if probes == nil || id == "" {
			return "", false
		}
		return probes.Result(id, t)
	}
	// kubelet: a container without the probe is started (ready) as soon as
	// it runs (has started); a result is consulted only for a probe the
	// container has, so that a readiness read back from the API object
	// while a startup probe held it back cannot outlive that probe.
	started := func(spec *corev1.Container, c *corev1.ContainerStatus) bool {
		if c.State.Running == nil {
			return false
		}
		if spec == nil || spec.StartupProbe == nil {
			return true
		}
		r, ok := result(c.ContainerID, bus.ProbeStartup)
		return ok && r == bus.ProbeSuccess
	}
	ready := func(spec *corev1.Container, c *corev1.ContainerStatus) bool {
		if c.State.Running == nil {
			return false
		}
		if spec == nil || spec.ReadinessProbe == nil {
			return true
		}
		r, ok := result(c.ContainerID, bus.ProbeReadiness)
		return ok && r == bus.ProbeSuccess
	}
	for i := range s.ContainerStatuses {
		c := &s.ContainerStatuses[i]
		spec := findContainer(pod.Spec.Containers, c.Name)
		st := started(spec, c)
		c.Started = &st
		c.Ready = st && ready(spec, c)
	}
	for i := range s.InitContainerStatuses {
		c := &s.InitContainerStatuses[i]
		spec := findContainer(pod.Spec.InitContainers, c.Name)
		st := started(spec, c)
		c.Started = &st
		if spec == nil || !restartableInit(spec) {
			c.Ready = c.State.Terminated != nil && c.State.Terminated.ExitCode == 0
			continue
		}
		c.Ready = st && ready(spec, c)
	}
}

// Phase is the kubelet's getPhase over init and app containers and the
// restart policy (without the ContainerRestartRules feature).
func Phase(pod *corev1.Pod, statuses []corev1.ContainerStatus, podIsTerminal, podHasInitialized, static bool) corev1.PodPhase {
	var n phaseCounts
	n.countInit(&pod.Spec, statuses)
	n.countSidecars(&pod.Spec, statuses)
	n.countContainers(&pod.Spec, statuses)
	return n.phase(pod.Spec.RestartPolicy, podIsTerminal, podHasInitialized, static)
}

// phaseCounts tallies a pod's containers by state, as the phase needs them.
type phaseCounts struct {
	pendingInit, pendingSidecars, failedInit      int
	unknown, running, waiting, stopped, succeeded int
}

// countInit tallies the regular init containers: pending until they exit,
// failed when the last exit was non-zero.
func (n *phaseCounts) countInit(spec *corev1.PodSpec, statuses []corev1.ContainerStatus) {
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		if restartableInit(c) {
			continue
		}
		st := findStatus(statuses, c.Name)
		switch {
		case st == nil, st.State.Running != nil:
			n.pendingInit++
		case st.State.Terminated != nil:
			if st.State.Terminated.ExitCode != 0 {
				n.failedInit++
			}
		case st.State.Waiting != nil:
			if t := st.LastTerminationState.Terminated; t == nil {
				n.pendingInit++
			} else if t.ExitCode != 0 {
				n.failedInit++
			}
		default:
			n.pendingInit++
		}
	}
}

// countSidecars tallies the restartable init containers: pending until
// started; a stopped sidecar does not count towards the phase.
func (n *phaseCounts) countSidecars(spec *corev1.PodSpec, statuses []corev1.ContainerStatus) {
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		if !restartableInit(c) {
			continue
		}
		st := findStatus(statuses, c.Name)
		switch {
		case st == nil:
			n.unknown++
		case st.State.Running != nil:
			if st.Started == nil || !*st.Started {
				n.pendingSidecars++
			}
			n.running++
		case st.State.Terminated != nil:
		case st.State.Waiting != nil:
			if st.LastTerminationState.Terminated == nil {
				n.pendingSidecars++
				n.waiting++
			}
		default:
			n.pendingSidecars++
			n.unknown++
		}
	}
}

// countContainers tallies the regular containers.
func (n *phaseCounts) countContainers(spec *corev1.PodSpec, statuses []corev1.ContainerStatus) {
	for i := range spec.Containers {
		st := findStatus(statuses, spec.Containers[i].Name)
		switch {
		case st == nil:
			n.unknown++
		case st.State.Running != nil:
			n.running++
		case st.State.Terminated != nil:
			n.stopped++
			if st.State.Terminated.ExitCode == 0 {
				n.succeeded++
			}
		case st.State.Waiting != nil:
			if st.LastTerminationState.Terminated != nil {
				n.stopped++
			} else {
				n.waiting++
			}
		default:
			n.unknown++
		}
	}
}

// phase decides from the tallies.
func (n *phaseCounts) phase(policy corev1.RestartPolicy, podIsTerminal, podHasInitialized, static bool) corev1.PodPhase {
	if n.failedInit > 0 && policy == corev1.RestartPolicyNever {
		return corev1.PodFailed
	}
	switch {
	case n.pendingInit > 0 || (n.pendingSidecars > 0 && !podHasInitialized):
		return corev1.PodPending
	case n.waiting > 0:
		return corev1.PodPending
	case n.running > 0 && n.unknown == 0:
		return corev1.PodRunning
	case n.running == 0 && n.stopped > 0 && n.unknown == 0:
		return n.stoppedPhase(policy, podIsTerminal, static)
	default:
		return corev1.PodPending
	}
}

// stoppedPhase is the phase of a pod none of whose containers runs.
func (n *phaseCounts) stoppedPhase(policy corev1.RestartPolicy, podIsTerminal, static bool) corev1.PodPhase {
	// A terminal pod's containers do not restart whatever the policy
	// (the kubelet: not for static pods).
	if podIsTerminal && !static {
		if n.stopped == n.succeeded {
			return corev1.PodSucceeded
		}
		return corev1.PodFailed
	}
	switch {
	case policy == corev1.RestartPolicyAlways:
		return corev1.PodRunning
	case n.stopped == n.succeeded:
		return corev1.PodSucceeded
	case policy == corev1.RestartPolicyNever:
		return corev1.PodFailed
	}
	return corev1.PodRunning
}

func readyToStartCondition(pod *corev1.Pod, rs *bus.PodRuntimeStatus) corev1.PodCondition {
	c := corev1.PodCondition{Type: corev1.PodReadyToStartContainers, ObservedGeneration: pod.Generation, Status: corev1.ConditionFalse}
	// The sandbox (network) exists once the worker reports an IP or a
	// created container, and is gone once the pod is terminated.
	if rs.Terminated {
		return c
	}
	if rs.PodIP != "" {
		c.Status = corev1.ConditionTrue
		return c
	}
	for _, s := range append(slices.Clone(rs.InitContainerStatuses), rs.ContainerStatuses...) {
		if s.ContainerID != "" {
			c.Status = corev1.ConditionTrue
			break
		}
	}
	return c
}

func initializedCondition(pod *corev1.Pod, statuses []corev1.ContainerStatus, phase corev1.PodPhase) corev1.PodCondition {
	c := corev1.PodCondition{Type: corev1.PodInitialized, ObservedGeneration: pod.Generation, Status: corev1.ConditionTrue}
	var unknown, incomplete []string
	for i := range pod.Spec.InitContainers {
		spec := &pod.Spec.InitContainers[i]
		st := findStatus(statuses, spec.Name)
		if st == nil {
			unknown = append(unknown, spec.Name)
			continue
		}
		if restartableInit(spec) {
			if st.Started == nil || !*st.Started {
				incomplete = append(incomplete, spec.Name)
			}
		} else if !st.Ready {
			incomplete = append(incomplete, spec.Name)
		}
	}
	if phase == corev1.PodSucceeded && len(unknown) == 0 {
		c.Reason = ReasonPodCompleted
		return c
	}
	if anyRegularStarted(pod, statuses) {
		return c
	}
	var msgs []string
	if len(unknown) > 0 {
		msgs = append(msgs, fmt.Sprintf("containers with unknown status: %v", unknown))
	}
	if len(incomplete) > 0 {
		msgs = append(msgs, fmt.Sprintf("containers with incomplete status: %v", incomplete))
	}
	if len(msgs) > 0 {
		c.Status = corev1.ConditionFalse
		c.Reason = ReasonContainersNotInitialized
		c.Message = strings.Join(msgs, ", ")
	}
	return c
}

func containersReadyCondition(pod *corev1.Pod, statuses []corev1.ContainerStatus, phase corev1.PodPhase) corev1.PodCondition {
	c := corev1.PodCondition{Type: corev1.ContainersReady, ObservedGeneration: pod.Generation, Status: corev1.ConditionTrue}
	if statuses == nil {
		c.Status, c.Reason = corev1.ConditionFalse, ReasonUnknownContainerStatuses
		return c
	}
	var unknown, unready []string
	check := func(name string) {
		st := findStatus(statuses, name)
		switch {
		case st == nil:
			unknown = append(unknown, name)
		case !st.Ready:
			unready = append(unready, name)
		}
	}
	for i := range pod.Spec.InitContainers {
		if restartableInit(&pod.Spec.InitContainers[i]) {
			check(pod.Spec.InitContainers[i].Name)
		}
	}
	for i := range pod.Spec.Containers {
		check(pod.Spec.Containers[i].Name)
	}
	if (phase == corev1.PodSucceeded && len(unknown) == 0) || phase == corev1.PodFailed {
		return terminalReadiness(pod, corev1.ContainersReady, phase)
	}
	var msgs []string
	if len(unknown) > 0 {
		msgs = append(msgs, fmt.Sprintf("containers with unknown status: %v", unknown))
	}
	if len(unready) > 0 {
		msgs = append(msgs, fmt.Sprintf("containers with unready status: %v", unready))
	}
	if len(msgs) > 0 {
		c.Status = corev1.ConditionFalse
		c.Reason = ReasonContainersNotReady
		c.Message = strings.Join(msgs, ", ")
	}
	return c
}

// podReadyCondition: Ready follows ContainersReady, and then needs every
// readiness gate's condition True.
func podReadyCondition(pod *corev1.Pod, conditions []corev1.PodCondition, statuses []corev1.ContainerStatus, phase corev1.PodPhase) corev1.PodCondition {
	cr := containersReadyCondition(pod, statuses, phase)
	c := corev1.PodCondition{Type: corev1.PodReady, ObservedGeneration: pod.Generation, Status: cr.Status, Reason: cr.Reason, Message: cr.Message}
	if cr.Status != corev1.ConditionTrue {
		return c
	}
	var msgs []string
	for _, g := range pod.Spec.ReadinessGates {
		gc := findCondition(conditions, g.ConditionType)
		switch {
		case gc == nil:
			msgs = append(msgs, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", string(g.ConditionType)))
		case gc.Status != corev1.ConditionTrue:
			msgs = append(msgs, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %v", string(g.ConditionType), gc.Status))
		}
	}
	if len(msgs) > 0 {
		c.Status = corev1.ConditionFalse
		c.Reason = ReasonReadinessGatesNotReady
		c.Message = strings.Join(msgs, ", ")
	}
	return c
}

func terminalReadiness(pod *corev1.Pod, t corev1.PodConditionType, phase corev1.PodPhase) corev1.PodCondition {
	c := corev1.PodCondition{Type: t, ObservedGeneration: pod.Generation, Status: corev1.ConditionFalse}
	switch phase {
	case corev1.PodFailed:
		c.Reason = ReasonPodFailed
	case corev1.PodSucceeded:
		c.Reason = ReasonPodCompleted
	}
	return c
}

// qosOf keeps the class the API server assigned at creation, else computes it.
func qosOf(pod *corev1.Pod, api corev1.PodStatus) corev1.PodQOSClass {
	if api.QOSClass != "" {
		return api.QOSClass
	}
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	return kube.QOSClass(pod)
}

func anyRegularRunning(pod *corev1.Pod, runtime []corev1.ContainerStatus) bool {
	for _, s := range runtime {
		if findContainer(pod.Spec.Containers, s.Name) != nil && s.State.Running != nil {
			return true
		}
	}
	return false
}

func anyRegularStarted(pod *corev1.Pod, statuses []corev1.ContainerStatus) bool {
	for _, s := range statuses {
		if findContainer(pod.Spec.Containers, s.Name) != nil && (s.State.Running != nil || s.State.Terminated != nil) {
			return true
		}
	}
	return false
}

func restartableInit(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

func terminalPhase(p corev1.PodPhase) bool {
	return p == corev1.PodSucceeded || p == corev1.PodFailed
}

func findStatus(list []corev1.ContainerStatus, name string) *corev1.ContainerStatus {
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

func findContainer(list []corev1.Container, name string) *corev1.Container {
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

func findCondition(list []corev1.PodCondition, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range list {
		if list[i].Type == t {
			return &list[i]
		}
	}
	return nil
}

// volumeMounts copies a container's mount statuses (status.volumeMounts),
// which the pod workers resolve.
func volumeMounts(in []corev1.VolumeMountStatus) []corev1.VolumeMountStatus {
	if in == nil {
		return nil
	}
	out := make([]corev1.VolumeMountStatus, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}
