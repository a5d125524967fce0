// Package admission decides whether a pod new to the node may run here, as
// the kubelet's PodAdmitHandlers do: a chain of handlers, the first
// rejection wins; the built-in ones check the pod is well-formed and that
// its requests fit the node's allocatable minus the pods already admitted.
package admission

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Kubelet rejection reasons (lifecycle/predicate.go).
const (
	ReasonOutOfCPU              = "OutOfcpu"
	ReasonOutOfMemory           = "OutOfmemory"
	ReasonOutOfEphemeralStorage = "OutOfephemeral-storage"
	ReasonOutOfPods             = "OutOfpods"
	// ReasonInvalidPod rejects a pod the workers cannot run as written.
	ReasonInvalidPod = "InvalidPod"
)

// MaxGracePeriodSeconds bounds a sane grace period (one day).
const MaxGracePeriodSeconds = 24 * 60 * 60

// Attributes are what a handler decides on.
type Attributes struct {
	Pod *corev1.Pod
	// OtherPods are the pods already admitted on the node.
	OtherPods []*corev1.Pod
	// Used, if set, is the sum of the requests of pods already admitted
	// that are not in OtherPods (callers that keep a running sum).
	Used corev1.ResourceList
	// Local lists the admitted pods whose requests Used sums, for the
	// checks that look at pods, not sums (host ports); nil: none.
	Local func() []*corev1.Pod
	// Started: the node already started the pod (the runtime holds its
	// containers, or its status has a start time, which only the node
	// sets): admitted before, it is being admitted again by a pod worker
	// that restarted or took its partition over.
	Started bool
}

// Result of an admission check.
type Result struct {
	Admit   bool
	Reason  string
	Message string
}

// Handler is one admission check (kubelet: PodAdmitHandler).
type Handler interface {
	Admit(attrs *Attributes) Result
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(attrs *Attributes) Result

// Admit calls f.
func (f HandlerFunc) Admit(a *Attributes) Result { return f(a) }

// Chain runs handlers in order; the first rejection wins.
type Chain []Handler

// Admit runs the chain.
func (c Chain) Admit(attrs *Attributes) Result {
	for _, h := range c {
		if r := h.Admit(attrs); !r.Admit {
			return r
		}
	}
	return Result{Admit: true}
}

// Validate rejects pods the workers cannot run: no containers, duplicate or
// invalid container names, absurd grace periods, negative requests.
func Validate() Handler {
	return HandlerFunc(func(a *Attributes) Result {
		if err := validatePod(a.Pod); err != nil {
			return Result{Reason: ReasonInvalidPod, Message: err.Error()}
		}
		return Result{Admit: true}
	})
}

func validatePod(p *corev1.Pod) error {
	if len(p.Spec.Containers) == 0 {
		return fmt.Errorf("spec.containers: the pod has no containers")
	}
	seen := map[string]bool{}
	check := func(field string, cs []corev1.Container) error {
		for i, c := range cs {
			if errs := validation.IsDNS1123Label(c.Name); len(errs) > 0 {
				return fmt.Errorf("%s[%d].name %q: %s", field, i, c.Name, strings.Join(errs, "; "))
			}
			if seen[c.Name] {
				return fmt.Errorf("%s[%d].name %q: duplicate container name", field, i, c.Name)
			}
			seen[c.Name] = true
			for name, q := range c.Resources.Requests {
				if q.Sign() < 0 {
					return fmt.Errorf("%s[%d].resources.requests.%s: negative (%s)", field, i, name, q.String())
				}
			}
		}
		return nil
	}
	if err := check("spec.initContainers", p.Spec.InitContainers); err != nil {
		return err
	}
	if err := check("spec.containers", p.Spec.Containers); err != nil {
		return err
	}
	if g := p.Spec.TerminationGracePeriodSeconds; g != nil && (*g < 0 || *g > MaxGracePeriodSeconds) {
		return fmt.Errorf("spec.terminationGracePeriodSeconds: %d is out of range 0 to %d", *g, MaxGracePeriodSeconds)
	}
	return nil
}

// Allocatable returns the node's allocatable resources.
type Allocatable func() corev1.ResourceList

// insufficient is one resource that does not fit.
type insufficient struct {
	name                      corev1.ResourceName
	requested, used, capacity int64
}

// ResourceFit rejects a pod whose requests do not fit the node's allocatable
// minus the requests of the pods already admitted (kubelet: the resource
// part of GeneralPredicates, one pod counting against "pods").
func ResourceFit(alloc Allocatable) Handler {
	return HandlerFunc(func(a *Attributes) Result {
		avail := alloc()
		req := Requests(a.Pod)
		used := a.Used.DeepCopy()
		if used == nil {
			used = corev1.ResourceList{}
		}
		for _, o := range a.OtherPods {
			Add(used, Requests(o))
		}
		var fails []insufficient
		for _, n := range []corev1.ResourceName{corev1.ResourcePods, corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
			capQ, ok := avail[n]
			if !ok {
				continue
			}
			r, u := req[n], used[n]
			if r.IsZero() {
				continue
			}
			if value(n, r)+value(n, u) > value(n, capQ) {
				fails = append(fails, insufficient{n, value(n, r), value(n, u), value(n, capQ)})
			}
		}
		if len(fails) == 0 {
			return Result{Admit: true}
		}
		// kubelet: the first insufficient resource names the reason.
		f := fails[0]
		msgs := make([]string, len(fails))
		for i, x := range fails {
			msgs[i] = fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d", x.name, x.requested, x.used, x.capacity)
		}
		return Result{Reason: "OutOf" + string(f.name), Message: strings.Join(msgs, ", ")}
	})
}

// value is the kubelet's unit of a resource: millicores for cpu, plain
// numbers otherwise.
func value(n corev1.ResourceName, q resource.Quantity) int64 {
	if n == corev1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}

// Add adds b to a.
func Add(a, b corev1.ResourceList) {
	for n, q := range b {
		v := a[n]
		v.Add(q)
		a[n] = v
	}
}

// Sub takes b from a.
func Sub(a, b corev1.ResourceList) {
	for n, q := range b {
		v := a[n]
		v.Sub(q)
		a[n] = v
	}
}

// Requests is what a pod asks of the node: its effective requests (init
// containers included, as the kubelet computes them) and one pod.
func Requests(p *corev1.Pod) corev1.ResourceList {
	r := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
	r[corev1.ResourcePods] = *resource.NewQuantity(1, resource.DecimalSI)
	return r
}
