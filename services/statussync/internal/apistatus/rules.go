package apistatus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// OwnedConditions are the pod conditions statussync generates; every other
// condition (readiness gates, DisruptionTarget...) belongs to someone else
// and is left as the API server has it. PodScheduled is the kubelet's to
// set too (always True on the node it runs on: a pod bound by nodeName,
// with no scheduler, gets it from the kubelet alone).
var OwnedConditions = []corev1.PodConditionType{
	corev1.PodReadyToStartContainers,
	corev1.PodInitialized,
	corev1.PodReady,
	corev1.ContainersReady,
	corev1.PodScheduled,
}

// Shared reports whether the condition type is one statussync sets from the
// worker's decision while others may set it too (kubelet:
// PodConditionSharedByKubelet): DisruptionTarget.
func Shared(t corev1.PodConditionType) bool { return t == corev1.DisruptionTarget }

// Owned reports whether statussync generates the condition type.
func Owned(t corev1.PodConditionType) bool {
	for _, o := range OwnedConditions {
		if o == t {
			return true
		}
	}
	return false
}

func foreignConditions(list []corev1.PodCondition) []corev1.PodCondition {
	out := make([]corev1.PodCondition, 0, len(list)+len(OwnedConditions))
	for _, c := range list {
		if !Owned(c.Type) {
			out = append(out, *c.DeepCopy())
		}
	}
	return out
}

// workerConditions sets the shared conditions the worker decided
// (DisruptionTarget of an eviction) on the foreign ones, each in place of
// one of its type, keeping the transition time of an unchanged status. Any
// other condition is not the worker's to set.
func workerConditions(list, worker []corev1.PodCondition) []corev1.PodCondition {
	for _, w := range worker {
		if Shared(w.Type) {
			list = replaceCondition(list, w)
		}
	}
	return list
}

// replaceCondition puts c in place of the condition of its type in list, or
// appends it; an unchanged status keeps its transition time.
func replaceCondition(list []corev1.PodCondition, c corev1.PodCondition) []corev1.PodCondition {
	c = *c.DeepCopy()
	i := slices.IndexFunc(list, func(o corev1.PodCondition) bool { return o.Type == c.Type })
	if i < 0 {
		return append(list, c)
	}
	if list[i].Status == c.Status {
		c.LastTransitionTime = list[i].LastTransitionTime
	}
	list[i] = c
	return list
}

// CheckTransition refuses container state changes that cannot happen: a
// terminated container comes back only under restartPolicy Always, or under
// OnFailure after a failure (kubelet: checkContainerStateTransition).
func CheckTransition(old, next *corev1.PodStatus, spec *corev1.PodSpec) error {
	if spec.RestartPolicy == corev1.RestartPolicyAlways {
		return nil
	}
	check := func(olds, news []corev1.ContainerStatus, initc bool) error {
		for _, o := range olds {
			if o.State.Terminated == nil {
				continue
			}
			if initc {
				if c := findContainer(spec.InitContainers, o.Name); c != nil && restartableInit(c) {
					continue
				}
			}
			if o.State.Terminated.ExitCode != 0 && spec.RestartPolicy == corev1.RestartPolicyOnFailure {
				continue
			}
			if n := findStatus(news, o.Name); n != nil && n.State.Terminated == nil {
				return fmt.Errorf("terminated container %s may not leave the terminated state under restartPolicy %s", o.Name, spec.RestartPolicy)
			}
		}
		return nil
	}
	if err := check(old.ContainerStatuses, next.ContainerStatuses, false); err != nil {
		return err
	}
	return check(old.InitContainerStatuses, next.InitContainerStatuses, true)
}

// Prepare applies the status manager's rules to a freshly generated status
// against the previous one (kubelet: updateStatusInternal): transition times
// move only when a condition's status changes, the first start time stays,
// and timestamps are cut to seconds as the API server stores them.
func Prepare(pod *corev1.Pod, old, s *corev1.PodStatus, now metav1.Time) {
	for i := range s.Conditions {
		c := &s.Conditions[i]
		if !Owned(c.Type) {
			continue // foreign conditions keep their own times
		}
		c.LastTransitionTime = now
		if o := findCondition(old.Conditions, c.Type); o != nil && o.Status == c.Status {
			c.LastTransitionTime = o.LastTransitionTime
		}
	}
	switch {
	case old.StartTime != nil && !old.StartTime.IsZero():
		s.StartTime = old.StartTime.DeepCopy()
	case s.StartTime == nil || s.StartTime.IsZero():
		t := now
		s.StartTime = &t
	}
	if old.ObservedGeneration > s.ObservedGeneration {
		s.ObservedGeneration = old.ObservedGeneration
	}
	Normalize(pod, s)
}

// maxTerminationMessage is what the kubelet allows all of a pod's
// termination messages together.
const maxTerminationMessage = 12 * 1024

// Normalize cuts times to seconds, bounds termination messages and sorts
// statuses as the kubelet does (kubelet: normalizeStatus), so that a status
// compares equal to its copy read back from the API server.
func Normalize(pod *corev1.Pod, s *corev1.PodStatus) {
	perStatus := maxTerminationMessage
	if n := len(pod.Spec.Containers) + len(pod.Spec.InitContainers) + len(pod.Spec.EphemeralContainers); n > 0 {
		perStatus /= n
	}
	cut := func(t *metav1.Time) { *t = t.Rfc3339Copy() }
	state := func(c *corev1.ContainerState) {
		if c.Running != nil {
			cut(&c.Running.StartedAt)
		}
		if c.Terminated != nil {
			cut(&c.Terminated.StartedAt)
			cut(&c.Terminated.FinishedAt)
			if len(c.Terminated.Message) > perStatus {
				c.Terminated.Message = c.Terminated.Message[:perStatus]
			}
		}
	}
	if s.StartTime != nil {
		cut(s.StartTime)
	}
	for i := range s.Conditions {
		cut(&s.Conditions[i].LastProbeTime)
		cut(&s.Conditions[i].LastTransitionTime)
	}
	for _, list := range [][]corev1.ContainerStatus{s.InitContainerStatuses, s.ContainerStatuses, s.EphemeralContainerStatuses} {
		for i := range list {
			state(&list[i].State)
			state(&list[i].LastTerminationState)
		}
	}
	sort.SliceStable(s.ContainerStatuses, func(i, j int) bool { return s.ContainerStatuses[i].Name < s.ContainerStatuses[j].Name })
	sort.SliceStable(s.EphemeralContainerStatuses, func(i, j int) bool {
		return s.EphemeralContainerStatuses[i].Name < s.EphemeralContainerStatuses[j].Name
	})
	// Init containers stay in spec order.
	order := map[string]int{}
	for i, c := range pod.Spec.InitContainers {
		order[c.Name] = i
	}
	sort.SliceStable(s.InitContainerStatuses, func(i, j int) bool {
		return order[s.InitContainerStatuses[i].Name] < order[s.InitContainerStatuses[j].Name]
	})
}

// EqualByAgent compares two normalised statuses on what statussync owns:
// owned and shared conditions by type, status, reason and message; everything else but
// foreign conditions and resource claim statuses in full
// (kubelet: isPodStatusByKubeletEqual).
func EqualByAgent(a, b *corev1.PodStatus) bool {
	if !ownedConditionsAgree(a, b) {
		return false
	}
	ac := agentView(a, b)
	return sameEncoding(&ac, b) || equality.Semantic.DeepEqual(&ac, b)
}

// ownedConditionsAgree compares the owned and shared conditions of a and b
// by type, status, reason and message.
func ownedConditionsAgree(a, b *corev1.PodStatus) bool {
	owned := func(list []corev1.PodCondition) map[corev1.PodConditionType]corev1.PodCondition {
		m := map[corev1.PodConditionType]corev1.PodCondition{}
		for _, c := range list {
			if Owned(c.Type) || Shared(c.Type) {
				m[c.Type] = c
			}
		}
		return m
	}
	ca, cb := owned(a.Conditions), owned(b.Conditions)
	if len(ca) != len(cb) {
		return false
	}
	for t, x := range ca {
		y, ok := cb[t]
		if !ok || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message {
			return false
		}
	}
	return true
}

// agentView is a shallow copy of a with b's conditions and resource claim
// statuses, to compare in full with b. Nothing of a is written.
func agentView(a, b *corev1.PodStatus) corev1.PodStatus {
	ac := *a
	ac.Conditions = b.Conditions
	ac.ResourceClaimStatuses = b.ResourceClaimStatuses
	ac.ExtendedResourceClaimStatus = b.ExtendedResourceClaimStatus
	ac.NodeAllocatableResourceClaimStatuses = b.NodeAllocatableResourceClaimStatuses
	return ac
}

// sameEncoding says whether two normalised statuses have the same protobuf
// encoding. The API types write it deterministically (map keys in order)
// and keep every field but a time's fraction of a second, which Normalize
// cuts: normalised statuses that encode alike are semantically equal. A
// regenerated status that did not change is so told equal without the
// reflective comparison, which would make EqualByAgent three to four times
// slower. Statuses that encode differently may still be equal (a quantity
// written two ways) and go to that comparison.
func sameEncoding(a, b *corev1.PodStatus) bool {
	x, err := a.Marshal()
	if err != nil {
		return false
	}
	y, err := b.Marshal()
	return err == nil && bytes.Equal(x, y)
}

// Merge combines the API copy's status with the generated one for writing
// (kubelet: mergePodStatus): conditions statussync does not own stay as the
// API has them, resource claim statuses are never touched, a terminal phase
// is held back while containers may still run, and a terminal phase never
// goes out with Ready or ContainersReady True.
func Merge(pod *corev1.Pod, api, next corev1.PodStatus, couldHaveRunningContainers bool) corev1.PodStatus {
	next = *next.DeepCopy()
	// the API's conditions but those the new status sets, then those: a
	// condition statussync owns but did not generate (PodScheduled, in a
	// status cached before it owned it) stays as the API server has it.
	var conds []corev1.PodCondition
	for _, c := range api.Conditions {
		if !Owned(c.Type) || findCondition(next.Conditions, c.Type) == nil {
			conds = append(conds, c)
		}
	}
	// A shared condition goes with the transition to a terminal phase, once
	// no container can run: not earlier, where the phase is held back too.
	toTerminal := !terminalPhase(api.Phase) && terminalPhase(next.Phase) && !couldHaveRunningContainers
	for _, c := range next.Conditions {
		switch {
		case Owned(c.Type):
			conds = append(conds, c)
		case Shared(c.Type) && toTerminal:
			c.LastTransitionTime = metav1.Now().Rfc3339Copy()
			conds = replaceCondition(conds, c)
		}
	}
	next.Conditions = conds
	next.ResourceClaimStatuses = api.ResourceClaimStatuses
	next.ExtendedResourceClaimStatus = api.ExtendedResourceClaimStatus
	next.NodeAllocatableResourceClaimStatuses = api.NodeAllocatableResourceClaimStatuses
	if !terminalPhase(api.Phase) && terminalPhase(next.Phase) && couldHaveRunningContainers {
		next.Phase, next.Reason, next.Message = api.Phase, api.Reason, api.Message
	}
	if terminalPhase(next.Phase) {
		for _, t := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
			c := findCondition(next.Conditions, t)
			if c != nil && c.Status == corev1.ConditionTrue {
				fixed := terminalReadiness(pod, t, next.Phase)
				fixed.LastTransitionTime = metav1.Now().Rfc3339Copy()
				*c = fixed
			}
		}
	}
	return next
}

// StatusPatch is the two-way strategic merge patch from the API copy's
// status to the new one, with the pod's UID in it so that the API server
// refuses it for a pod recreated under the same name. unchanged is true when
// the patch would carry nothing but the UID (kubelet: PatchPodStatus). It
// is built from the typed statuses (fastStatusPatch) when they hold nothing
// only the reflective diff handles with certainty.
func StatusPatch(uid types.UID, old, next corev1.PodStatus) (patch []byte, unchanged bool, err error) {
	patch, ok := fastStatusPatch(uid, &old, &next)
	if !ok {
		if patch, err = statusPatchReflective(uid, old, next); err != nil {
			return nil, false, err
		}
	}
	only := fmt.Appendf(nil, `{"metadata":{"uid":%q}}`, uid)
	return patch, bytes.Equal(patch, only), nil
}

// statusPatchReflective is the patch of strategicpatch.CreateTwoWayMergePatch
// over the JSON of the two pods, the reference fastStatusPatch matches.
func statusPatchReflective(uid types.UID, old, next corev1.PodStatus) ([]byte, error) {
	oldJSON, err := json.Marshal(corev1.Pod{Status: old})
	if err != nil {
		return nil, err
	}
	newJSON, err := json.Marshal(corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}, Status: next})
	if err != nil {
		return nil, err
	}
	return strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, corev1.Pod{})
}
