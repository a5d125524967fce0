package admission

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/kube"
)

// The process runtime runs a container as a process of the host: no
// namespaces, seccomp filter, LSM label, capability bounding or
// no_new_privs of its own. A pod that sets a security field it cannot
// enforce is refused rather than run without it. runAsUser, runAsGroup and
// runAsNonRoot are the runtime's own business (it checks them at start);
// AppArmor is the AppArmor handler's.

// notEnforced is one refused setting: the field, its value, why.
type notEnforced struct{ field, value, why string }

func (n *notEnforced) String() string {
	return fmt.Sprintf("%s: %s: not enforced by the process runtime (%s)", n.field, n.value, n.why)
}

// ProcessUnsupported names the first security setting of the pod the
// process runtime cannot enforce, "" when there is none.
func ProcessUnsupported(p *corev1.Pod) string {
	if n := processPodFields(p); n != nil {
		return n.String()
	}
	var found *notEnforced
	kube.VisitContainers(p, func(c *corev1.Container, path string) bool {
		found = processContainerFields(p, c, path)
		return found == nil
	})
	if found != nil {
		return found.String()
	}
	return ""
}

// ProcessStartCheck refuses to start container c of p on the process
// runtime when c, or its pod, sets a security field the runtime cannot
// enforce, AppArmor included: admission saw the pod, but an ephemeral
// container or an annotation may come after it.
func ProcessStartCheck(p *corev1.Pod, c *corev1.Container) error {
	if n := processPodFields(p); n != nil {
		return fmt.Errorf("%s", n)
	}
	path := "container " + c.Name
	kube.VisitContainers(p, func(o *corev1.Container, at string) bool {
		if o.Name == c.Name {
			path = at
		}
		return o.Name != c.Name
	})
	if n := processContainerFields(p, c, path); n != nil {
		return fmt.Errorf("%s", n)
	}
	if prof := kube.AppArmorProfile(p, c); prof != nil && prof.Type != corev1.AppArmorProfileTypeUnconfined {
		return fmt.Errorf("Cannot enforce AppArmor: %v", errProcessAppArmor)
	}
	return nil
}

const viaSetuid = "a host process may gain capabilities through set-user-ID and file-capability programs"

// processPodFields checks the pod-level fields.
func processPodFields(p *corev1.Pod) *notEnforced {
	if p.Spec.HostUsers != nil && !*p.Spec.HostUsers {
		return &notEnforced{"spec.hostUsers", "false", "it gives no user namespace"}
	}
	if p.Spec.RuntimeClassName != nil && *p.Spec.RuntimeClassName != "" {
		return &notEnforced{"spec.runtimeClassName", *p.Spec.RuntimeClassName, "a host process runs under no runtime handler"}
	}
	ps := p.Spec.SecurityContext
	if ps == nil {
		return nil
	}
	const at = "spec.securityContext."
	switch {
	case len(ps.Sysctls) > 0:
		return &notEnforced{at + "sysctls", ps.Sysctls[0].Name + "=" + ps.Sysctls[0].Value, "a host process shares the host's kernel settings"}
	case len(ps.SupplementalGroups) > 0:
		return &notEnforced{at + "supplementalGroups", fmt.Sprint(ps.SupplementalGroups), "it runs a pod's processes with no supplementary groups"}
	case ps.FSGroup != nil:
		return &notEnforced{at + "fsGroup", fmt.Sprint(*ps.FSGroup), "it runs a pod's processes with no supplementary groups"}
	}
	return nil
}

// processContainerFields checks the fields that apply to container c (at
// path): its security settings, then its host ports.
func processContainerFields(p *corev1.Pod, c *corev1.Container, path string) *notEnforced {
	if n := processSecurityFields(p, c, path); n != nil {
		return n
	}
	if q, ok := c.Resources.Limits[corev1.ResourceEphemeralStorage]; ok {
		return &notEnforced{path + ".resources.limits.ephemeral-storage", q.String(), "a host process writes to the host's file systems, where its use cannot be told from anyone else's"}
	}
	return processHostPorts(c, path)
}

// processHostPorts refuses a host port the process runtime cannot map: a
// container's process listens on the host's network itself, so a host port
// is honoured only as the container port itself on every address.
func processHostPorts(c *corev1.Container, path string) *notEnforced {
	for i, port := range c.Ports {
		at := fmt.Sprintf("%s.ports[%d].", path, i)
		switch {
		case port.HostPort == 0:
		case port.HostPort != port.ContainerPort:
			return &notEnforced{at + "hostPort", fmt.Sprintf("%d", port.HostPort), fmt.Sprintf("a host process listens on the host's ports itself: it cannot map containerPort %d to another", port.ContainerPort)}
		case port.HostIP != "" && port.HostIP != "0.0.0.0" && port.HostIP != "::":
			return &notEnforced{at + "hostIP", port.HostIP, "a host process listens on the addresses it chooses: it cannot be kept to one"}
		}
	}
	return nil
}

// processSecurityFields checks container c's own securityContext and what
// it takes from the pod's.
func processSecurityFields(p *corev1.Pod, c *corev1.Container, path string) *notEnforced {
	ps, cs := p.Spec.SecurityContext, c.SecurityContext
	at := path + ".securityContext."
	// seccomp and SELinux: the container's, else the pod's.
	seccomp, seccompAt := (*corev1.SeccompProfile)(nil), ""
	selinux, selinuxAt := (*corev1.SELinuxOptions)(nil), ""
	if ps != nil {
		seccomp, seccompAt = ps.SeccompProfile, "spec.securityContext.seccompProfile"
		selinux, selinuxAt = ps.SELinuxOptions, "spec.securityContext.seLinuxOptions"
	}
	if cs != nil && cs.SeccompProfile != nil {
		seccomp, seccompAt = cs.SeccompProfile, at+"seccompProfile"
	}
	if cs != nil && cs.SELinuxOptions != nil {
		selinux, selinuxAt = cs.SELinuxOptions, at+"seLinuxOptions"
	}
	if seccomp != nil && seccomp.Type != corev1.SeccompProfileTypeUnconfined {
		return &notEnforced{seccompAt, "type " + string(seccomp.Type), "a host process runs with no seccomp filter"}
	}
	if selinux != nil && *selinux != (corev1.SELinuxOptions{}) {
		return &notEnforced{selinuxAt, fmt.Sprintf("%+v", *selinux), "it gives processes no SELinux label"}
	}
	if cs == nil {
		return nil
	}
	switch {
	case cs.Privileged != nil && *cs.Privileged:
		return &notEnforced{at + "privileged", "true", "it runs no container privileged"}
	case cs.Capabilities != nil && len(cs.Capabilities.Add) > 0:
		return &notEnforced{at + "capabilities.add", capNames(cs.Capabilities.Add), "it grants no capabilities"}
	case cs.Capabilities != nil && len(cs.Capabilities.Drop) > 0:
		return &notEnforced{at + "capabilities.drop", capNames(cs.Capabilities.Drop), viaSetuid}
	case cs.AllowPrivilegeEscalation != nil && !*cs.AllowPrivilegeEscalation:
		return &notEnforced{at + "allowPrivilegeEscalation", "false", "it does not set no_new_privs: " + viaSetuid}
	case cs.ReadOnlyRootFilesystem != nil && *cs.ReadOnlyRootFilesystem:
		return &notEnforced{at + "readOnlyRootFilesystem", "true", "a host process has no root filesystem of its own"}
	}
	return nil
}

func capNames(cs []corev1.Capability) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = string(c)
	}
	return strings.Join(names, ",")
}
