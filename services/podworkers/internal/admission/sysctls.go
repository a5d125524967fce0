package admission

import "github.com/splitlet/splitlet/libs/kube"

// ReasonSysctlForbidden rejects a pod that sets a sysctl the node does not
// allow (kubelet: sysctl.ForbiddenReason).
const ReasonSysctlForbidden = "SysctlForbidden"

// Sysctls rejects a pod whose securityContext.sysctls holds one the
// allowlist does not allow, with the kubelet's reason and message.
func Sysctls(allow *kube.SysctlAllowlist) Handler {
	return HandlerFunc(func(a *Attributes) Result {
		sc := a.Pod.Spec.SecurityContext
		if sc == nil {
			return Result{Admit: true}
		}
		for _, s := range sc.Sysctls {
			if err := allow.Check(s.Name, a.Pod.Spec.HostNetwork, a.Pod.Spec.HostIPC); err != nil {
				return Result{Reason: ReasonSysctlForbidden, Message: "forbidden sysctl: " + err.Error()}
			}
		}
		return Result{Admit: true}
	})
}
