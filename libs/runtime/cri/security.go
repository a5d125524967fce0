package cri

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/splitlet/splitlet/libs/kube"
)

// security is what the runtime applies of pods' security settings beyond
// the plain fields of config.go: seccomp, AppArmor, SELinux, /proc masks,
// the supplemental groups policy, and what the CRI runtime can do.
type security struct {
	// seccompRoot is the directory of Localhost seccomp profiles (the
	// kubelet's <root-dir>/seccomp); seccompDefault makes RuntimeDefault
	// the profile of a container that names none (kubelet: seccompDefault).
	seccompRoot    string
	seccompDefault bool
	// appArmor is nil when the host confines containers with AppArmor,
	// else why not.
	appArmor error
	// userNamespaces and groupsPolicy: the CRI runtime reports that it
	// gives pods user namespaces (its default handler) and applies
	// supplementalGroupsPolicy Strict.
	userNamespaces bool
	groupsPolicy   bool
	// rro names the runtime handlers that make read-only mounts
	// recursively read-only ("" the default handler).
	rro map[string]bool
}

// WithSeccompProfileRoot sets the directory of Localhost seccomp profiles
// (the kubelet's <root-dir>/seccomp; default /var/lib/kubelet/seccomp).
func WithSeccompProfileRoot(dir string) Option {
	return func(o *options) { o.security.seccompRoot = or(dir, o.security.seccompRoot) }
}

// WithSeccompDefault makes RuntimeDefault the seccomp profile of every
// container that names none, in its securityContext or its pod's (the
// kubelet's seccompDefault; default off: such a container is unconfined).
func WithSeccompDefault(on bool) Option { return func(o *options) { o.security.seccompDefault = on } }

// DefaultSeccompProfileRoot is the kubelet's seccomp directory under its
// default root directory.
const DefaultSeccompProfileRoot = "/var/lib/kubelet/seccomp"

// AppArmor is nil when the runtime confines containers with the AppArmor
// profiles pods ask for, else why it cannot (admission refuses such pods,
// as the kubelet does).
func (r *Runtime) AppArmor() error { return r.opts.security.appArmor }

// SupplementalGroupsPolicy says whether the CRI runtime applies
// supplementalGroupsPolicy Strict (it reports the feature in its status;
// containerd 1.6 does not).
func (r *Runtime) SupplementalGroupsPolicy() bool { return r.opts.security.groupsPolicy }

// readFeatures reads what the CRI runtime reports of its optional features
// (kubelet: the runtime's status, its handlers and features; a runtime
// that reports none has none).
func (s *security) readFeatures(ctx context.Context, status func(context.Context, bool) (*runtimeapi.StatusResponse, error)) error {
	resp, err := status(ctx, false)
	if err != nil {
		return err
	}
	for _, h := range resp.GetRuntimeHandlers() {
		if h.GetName() == "" {
			s.userNamespaces = h.GetFeatures().GetUserNamespaces()
		}
		if h.GetFeatures().GetRecursiveReadOnlyMounts() {
			if s.rro == nil {
				s.rro = map[string]bool{}
			}
			s.rro[h.GetName()] = true
		}
	}
	s.groupsPolicy = resp.GetFeatures().GetSupplementalGroupsPolicy()
	return nil
}

// checkSandbox refuses a pod the runtime cannot give what its sandbox
// needs: a user namespace (kubelet: the sandbox is not created, with its
// message; this runtime maps no user namespaces, whatever the CRI runtime
// supports).
func (s *security) checkSandbox(p *corev1.Pod) error {
	if p.Spec.HostUsers == nil || *p.Spec.HostUsers {
		return nil
	}
	if !s.userNamespaces {
		return errors.New("can't set `spec.hostUsers: false`, runtime does not support user namespaces")
	}
	return errors.New("can't set `spec.hostUsers: false`: the cri runtime of Splitlet does not map user namespaces")
}

// sandbox completes the sandbox's security context (kubelet:
// generatePodSandboxLinuxConfig): the runtime's default seccomp profile
// for the sandbox's own process, the pod's groups, groups policy and
// SELinux label.
func (s *security) sandbox(p *corev1.Pod, sc *runtimeapi.LinuxSandboxSecurityContext) {
	sc.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	if ps := p.Spec.SecurityContext; ps != nil {
		sc.SupplementalGroups = podGroups(ps)
		sc.SupplementalGroupsPolicy = groupsPolicy(ps)
		sc.SelinuxOptions = seLinux(ps.SELinuxOptions)
	}
}

// podGroups are the supplemental groups of a pod's processes: the fsGroup,
// so that they may use the volumes given to it, and supplementalGroups.
func podGroups(ps *corev1.PodSecurityContext) []int64 {
	var gs []int64
	if ps.FSGroup != nil {
		gs = append(gs, *ps.FSGroup)
	}
	return append(gs, ps.SupplementalGroups...)
}

func groupsPolicy(ps *corev1.PodSecurityContext) runtimeapi.SupplementalGroupsPolicy {
	if ps.SupplementalGroupsPolicy != nil && *ps.SupplementalGroupsPolicy == corev1.SupplementalGroupsPolicyStrict {
		return runtimeapi.SupplementalGroupsPolicy_Strict
	}
	return runtimeapi.SupplementalGroupsPolicy_Merge
}

func seLinux(o *corev1.SELinuxOptions) *runtimeapi.SELinuxOption {
	if o == nil {
		return nil
	}
	return &runtimeapi.SELinuxOption{User: o.User, Role: o.Role, Type: o.Type, Level: o.Level}
}

// container completes a container's security context (kubelet:
// determineEffectiveSecurityContext): its seccomp and AppArmor profiles,
// SELinux label (the container's over the pod's), /proc masks and groups
// policy. An error is a setting the runtime cannot honour; the container is
// not created (CreateContainerConfigError).
func (s *security) container(p *corev1.Pod, c *corev1.Container, sc *runtimeapi.LinuxContainerSecurityContext) error {
	var err error
	if sc.Seccomp, err = s.seccomp(p, c); err != nil {
		return err
	}
	if sc.Apparmor, sc.ApparmorProfile, err = s.appArmorProfile(p, c); err != nil {
		return err
	}
	if sc.MaskedPaths, sc.ReadonlyPaths, err = procPaths(c); err != nil {
		return err
	}
	if ps := p.Spec.SecurityContext; ps != nil {
		sc.SelinuxOptions = seLinux(ps.SELinuxOptions)
		sc.SupplementalGroupsPolicy = groupsPolicy(ps)
	}
	if cs := c.SecurityContext; cs != nil && cs.SELinuxOptions != nil {
		sc.SelinuxOptions = seLinux(cs.SELinuxOptions)
	}
	return nil
}

// seccomp is the container's seccomp profile: its own securityContext's,
// else the pod's, else RuntimeDefault with seccompDefault and Unconfined
// without (kubelet: getSeccompProfile). A Localhost profile is a file
// under the seccomp root; the CRI runtime reads it when it creates the
// container, and fails the creation when it cannot.
func (s *security) seccomp(p *corev1.Pod, c *corev1.Container) (*runtimeapi.SecurityProfile, error) {
	var prof *corev1.SeccompProfile
	if ps := p.Spec.SecurityContext; ps != nil && ps.SeccompProfile != nil {
		prof = ps.SeccompProfile
	}
	if cs := c.SecurityContext; cs != nil && cs.SeccompProfile != nil {
		prof = cs.SeccompProfile
	}
	switch {
	case prof == nil && s.seccompDefault, prof != nil && prof.Type == corev1.SeccompProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
	case prof != nil && prof.Type == corev1.SeccompProfileTypeLocalhost:
		if prof.LocalhostProfile == nil || *prof.LocalhostProfile == "" {
			return nil, errors.New("localhostProfile must be set if seccompProfile type is Localhost.")
		}
		// the API server admits only a relative path without '..'; a
		// static pod is not validated by it.
		name := *prof.LocalhostProfile
		if filepath.IsAbs(name) || strings.HasPrefix(filepath.Clean(name), "..") {
			return nil, fmt.Errorf("seccomp localhostProfile %q is not a path inside the seccomp profile root", name)
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost,
			LocalhostRef: filepath.Join(s.seccompRoot, name)}, nil
	}
	return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
}

// appArmorProfile is the container's AppArmor profile, as a profile and in
// the deprecated form older runtimes read (kubelet: getAppArmorProfile). A
// profile other than unconfined on a host without AppArmor is refused
// with the kubelet's admission message, never run unconfined: admission
// refuses such pods, and this catches ephemeral containers and annotations
// added after it.
func (s *security) appArmorProfile(p *corev1.Pod, c *corev1.Container) (*runtimeapi.SecurityProfile, string, error) {
	prof := kube.AppArmorProfile(p, c)
	if prof == nil {
		return nil, "", nil
	}
	if prof.Type != corev1.AppArmorProfileTypeUnconfined && s.appArmor != nil {
		return nil, "", fmt.Errorf("Cannot enforce AppArmor: %v", s.appArmor)
	}
	switch prof.Type {
	case corev1.AppArmorProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, corev1.DeprecatedAppArmorBetaProfileRuntimeDefault, nil
	case corev1.AppArmorProfileTypeUnconfined:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, corev1.DeprecatedAppArmorBetaProfileNameUnconfined, nil
	case corev1.AppArmorProfileTypeLocalhost:
		if prof.LocalhostProfile == nil || strings.TrimSpace(*prof.LocalhostProfile) == "" {
			return nil, "", errors.New("missing localhost apparmor profile name")
		}
		name := *prof.LocalhostProfile
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: name},
			corev1.DeprecatedAppArmorBetaProfileNamePrefix + name, nil
	}
	return nil, "", fmt.Errorf("unknown apparmor profile type: %q", prof.Type)
}

// procPaths are the /proc and /sys paths masked and made read-only in the
// container (kubelet: the defaults of procMount Default, which the kubelet
// always sends). procMount Unmasked is refused: the CRI cannot carry an
// empty list (the runtime then applies its defaults), and the API server
// admits Unmasked only with a user namespace, which this runtime does not
// give.
func procPaths(c *corev1.Container) (masked, readonly []string, err error) {
	if cs := c.SecurityContext; cs != nil && cs.ProcMount != nil && *cs.ProcMount == corev1.UnmaskedProcMount {
		return nil, nil, errors.New("procMount Unmasked needs a user namespace (hostUsers: false), which the cri runtime does not give")
	}
	return append([]string(nil), maskedPaths()...), append([]string(nil), readonlyPaths...), nil
}

// readonlyPaths and the start of maskedPaths are the kubelet's (and
// moby's) defaults.
var readonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}

var maskedPaths = sync.OnceValue(func() []string {
	paths := []string{"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		"/sys/firmware", "/sys/devices/virtual/powercap"}
	// each CPU's thermal throttle counters, where the host has them.
	cpus, _ := filepath.Glob("/sys/devices/system/cpu/cpu[0-9]*/thermal_throttle")
	for _, p := range cpus {
		if _, err := os.Stat(p); err == nil {
			paths = append(paths, p)
		}
	}
	return paths
})

// RecursiveReadOnlyMounts says whether the runtime handler of a pod (its
// RuntimeClass's, as handler resolves it; nil the default) makes
// read-only mounts recursively read-only, as the CRI runtime reports it
// (kubelet: runtimeClassSupportsRecursiveReadOnlyMounts; a handler that
// cannot be looked up has no such support).
func (r *Runtime) RecursiveReadOnlyMounts(handler func() (string, error)) bool {
	name := ""
	if handler != nil {
		var err error
		if name, err = handler(); err != nil {
			return false
		}
	}
	return r.opts.security.rro[name]
}
