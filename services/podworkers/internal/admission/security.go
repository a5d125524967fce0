package admission

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/cri"
	"github.com/splitlet/splitlet/libs/runtime/process"
	"github.com/splitlet/splitlet/libs/runtime/sim"
)

// The reasons of a pod whose security settings the node cannot enforce
// (kubelet: lifecycle.AppArmorNotAdmittedReason,
// SupplementalGroupsPolicyNotSupported, PodFeatureUnsupported).
const (
	ReasonAppArmor                             = "AppArmor"
	ReasonSupplementalGroupsPolicyNotSupported = "SupplementalGroupsPolicyNotSupported"
	ReasonPodFeatureUnsupported                = "PodFeatureUnsupported"
)

// RuntimeSecurity is implemented by a runtime that reports the optional
// security features it enforces on this host (the cri runtime).
type RuntimeSecurity interface {
	// AppArmor is nil when containers are confined by the AppArmor
	// profiles pods ask for, else why not.
	AppArmor() error
	// SupplementalGroupsPolicy says whether supplementalGroupsPolicy
	// Strict is applied.
	SupplementalGroupsPolicy() bool
}

// Enforcement is what the node's runtime enforces of pods' security
// settings.
type Enforcement struct {
	// AppArmor is nil when AppArmor profiles are applied, else why not.
	AppArmor error
	// SupplementalGroupsPolicy: supplementalGroupsPolicy Strict is applied.
	SupplementalGroupsPolicy bool
	// Unsupported, if set, names the first security setting of a pod the
	// runtime cannot enforce ("" for none).
	Unsupported func(p *corev1.Pod) string
	// ImageVolumes: the runtime mounts image volumes (a runtime.ImageVolumes).
	ImageVolumes bool
	// Runtime names the runtime in messages.
	Runtime string
}

// errProcessAppArmor is why the process runtime admits no AppArmor profile.
var errProcessAppArmor = errors.New("the process runtime does not confine containers with AppArmor profiles")

// EnforcementOf is what rt enforces: the sim runtime runs nothing and
// admits every setting; the process runtime runs host processes and
// enforces few (ProcessUnsupported); another runtime says what it enforces
// through RuntimeSecurity, or is taken to enforce no optional feature.
func EnforcementOf(rt runtime.Runtime) Enforcement {
	e := enforcementOf(rt)
	// a shadow of the cri runtime admits what the live one does.
	_, iv := rt.(runtime.ImageVolumes)
	e.ImageVolumes = iv || rt.Type() == cri.Type
	e.Runtime = rt.Type()
	return e
}

func enforcementOf(rt runtime.Runtime) Enforcement {
	switch rt.Type() {
	case sim.Type:
		return Enforcement{SupplementalGroupsPolicy: true}
	case process.Type:
		// a process has no supplementary groups at all (refused below),
		// which is what Strict asks.
		return Enforcement{AppArmor: errProcessAppArmor, SupplementalGroupsPolicy: true, Unsupported: ProcessUnsupported}
	}
	if s, ok := rt.(RuntimeSecurity); ok {
		return Enforcement{AppArmor: s.AppArmor(), SupplementalGroupsPolicy: s.SupplementalGroupsPolicy()}
	}
	return Enforcement{AppArmor: fmt.Errorf("the %s runtime does not report AppArmor support", rt.Type())}
}

// ImageVolumes rejects a pod with an image volume (volumes[].image) on a
// runtime that does not mount them (sim, process), with reason
// PodFeatureUnsupported, rather than run it without the volume.
func ImageVolumes(e Enforcement) Handler {
	return HandlerFunc(func(a *Attributes) Result {
		if e.ImageVolumes {
			return Result{Admit: true}
		}
		for _, v := range a.Pod.Spec.Volumes {
			if v.Image != nil {
				return Result{Reason: ReasonPodFeatureUnsupported, Message: fmt.Sprintf(
					"volume %q: image volumes are not supported by the %s runtime (they need the cri runtime)", v.Name, e.Runtime)}
			}
		}
		return Result{Admit: true}
	})
}

// SupplementalGroupsPolicy rejects a pod asking for supplementalGroupsPolicy
// Strict on a runtime that does not apply it, with the kubelet's reason and
// message (kubelet: the node does not report the feature).
func SupplementalGroupsPolicy(e Enforcement) Handler {
	return HandlerFunc(func(a *Attributes) Result {
		sc := a.Pod.Spec.SecurityContext
		if e.SupplementalGroupsPolicy || sc == nil || sc.SupplementalGroupsPolicy == nil || *sc.SupplementalGroupsPolicy != corev1.SupplementalGroupsPolicyStrict {
			return Result{Admit: true}
		}
		return Result{Reason: ReasonSupplementalGroupsPolicyNotSupported,
			Message: fmt.Sprintf("SupplementalGroupsPolicy=%s is not supported in this node", corev1.SupplementalGroupsPolicyStrict)}
	})
}

// AppArmor rejects a pending pod that asks for an AppArmor profile other
// than unconfined where none is applied, or for a Localhost profile without
// a name, with the kubelet's reason and message (kubelet: the AppArmor
// admit handler; a pod already running is not checked again).
func AppArmor(e Enforcement) Handler {
	return HandlerFunc(func(a *Attributes) Result {
		if ph := a.Pod.Status.Phase; ph != "" && ph != corev1.PodPending {
			return Result{Admit: true}
		}
		if err := appArmorError(a.Pod, e.AppArmor); err != nil {
			return Result{Reason: ReasonAppArmor, Message: "Cannot enforce AppArmor: " + err.Error()}
		}
		return Result{Admit: true}
	})
}

func appArmorError(p *corev1.Pod, host error) error {
	if !kube.AppArmorRequired(p) {
		return nil
	}
	if host != nil {
		return host
	}
	var err error
	kube.VisitContainers(p, func(c *corev1.Container, _ string) bool {
		prof := kube.AppArmorProfile(p, c)
		if prof != nil && prof.Type == corev1.AppArmorProfileTypeLocalhost && (prof.LocalhostProfile == nil || strings.TrimSpace(*prof.LocalhostProfile) == "") {
			err = fmt.Errorf("invalid empty AppArmor profile name (container %q)", c.Name)
		}
		return err == nil
	})
	return err
}

// Unsupported rejects a pod setting a security field the runtime cannot
// enforce (reason PodFeatureUnsupported, the message naming the field),
// rather than run it without.
func Unsupported(e Enforcement) Handler {
	return HandlerFunc(func(a *Attributes) Result {
		if e.Unsupported == nil {
			return Result{Admit: true}
		}
		if msg := e.Unsupported(a.Pod); msg != "" {
			return Result{Reason: ReasonPodFeatureUnsupported, Message: msg}
		}
		return Result{Admit: true}
	})
}
