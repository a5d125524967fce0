package kube

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// AppArmorHost says whether this host can confine processes with AppArmor:
// nil when it can, else why not, in the kubelet's words (the kubelet checks
// once at start that the kernel has AppArmor's filesystem and the module
// is enabled).
var AppArmorHost = sync.OnceValue(func() error {
	return appArmorHost("/sys/kernel/security/apparmor", "/sys/module/apparmor/parameters/enabled")
})

func appArmorHost(fsDir, enabledFile string) error {
	if _, err := os.Stat(fsDir); err != nil {
		return errors.New("AppArmor is not enabled on the host")
	}
	b, err := os.ReadFile(enabledFile)
	if err != nil || len(b) < 2 || b[0] != 'Y' {
		return errors.New("AppArmor is not enabled on the host")
	}
	return nil
}

// AppArmorProfile is the AppArmor profile a container asks for (nil:
// none): its own securityContext's, else the deprecated
// container.apparmor.security.beta.kubernetes.io/<name> annotation's (a
// static pod's annotations are not turned into fields), else the pod's
// (kubelet: apparmor.GetProfile). An annotation of no known form is
// ignored.
func AppArmorProfile(p *corev1.Pod, c *corev1.Container) *corev1.AppArmorProfile {
	if c.SecurityContext != nil && c.SecurityContext.AppArmorProfile != nil {
		return c.SecurityContext.AppArmorProfile
	}
	if v, ok := p.Annotations[corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+c.Name]; ok {
		switch {
		case v == corev1.DeprecatedAppArmorBetaProfileRuntimeDefault:
			return &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}
		case v == corev1.DeprecatedAppArmorBetaProfileNameUnconfined:
			return &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		case strings.HasPrefix(v, corev1.DeprecatedAppArmorBetaProfileNamePrefix):
			name := strings.TrimPrefix(v, corev1.DeprecatedAppArmorBetaProfileNamePrefix)
			return &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: &name}
		}
	}
	if p.Spec.SecurityContext != nil && p.Spec.SecurityContext.AppArmorProfile != nil {
		return p.Spec.SecurityContext.AppArmorProfile
	}
	return nil
}

// AppArmorRequired says whether the pod asks for an AppArmor profile other
// than unconfined anywhere: the pod's field, a container's (init and
// ephemeral ones too), or a deprecated annotation, whatever its value but
// "unconfined" (kubelet: a pod that needs AppArmor on the host).
func AppArmorRequired(p *corev1.Pod) bool {
	confined := func(a *corev1.AppArmorProfile) bool {
		return a != nil && a.Type != corev1.AppArmorProfileTypeUnconfined
	}
	if p.Spec.SecurityContext != nil && confined(p.Spec.SecurityContext.AppArmorProfile) {
		return true
	}
	found := false
	VisitContainers(p, func(c *corev1.Container, _ string) bool {
		found = c.SecurityContext != nil && confined(c.SecurityContext.AppArmorProfile)
		return !found
	})
	if found {
		return true
	}
	for k, v := range p.Annotations {
		if strings.HasPrefix(k, corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix) && v != corev1.DeprecatedAppArmorBetaProfileNameUnconfined {
			return true
		}
	}
	return false
}

// VisitContainers calls f with each container of the pod, init
// containers, then containers, then ephemeral ones (as a Container), and
// the field path of it (spec.containers[0]), until f returns false.
func VisitContainers(p *corev1.Pod, f func(c *corev1.Container, path string) bool) {
	for i := range p.Spec.InitContainers {
		if !f(&p.Spec.InitContainers[i], fieldIndex("spec.initContainers", i)) {
			return
		}
	}
	for i := range p.Spec.Containers {
		if !f(&p.Spec.Containers[i], fieldIndex("spec.containers", i)) {
			return
		}
	}
	for i := range p.Spec.EphemeralContainers {
		c := corev1.Container(p.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		if !f(&c, fieldIndex("spec.ephemeralContainers", i)) {
			return
		}
	}
}

func fieldIndex(field string, i int) string {
	return field + "[" + strconv.Itoa(i) + "]"
}
