package service

import (
	"errors"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/process"
	"github.com/splitlet/splitlet/services/podworkers/internal/admission"
	"github.com/splitlet/splitlet/services/podworkers/internal/podsync"
)

// admissionChain is the node's admission, in the kubelet's order: pod
// checks, the node's pressure (the eviction manager's), the sysctl allowlist, the OS, the supplemental groups policy, the
// resources and predicates, then AppArmor and the security settings the
// runtime cannot enforce.
func admissionChain(rt runtime.Runtime, sysctls *kube.SysctlAllowlist, alloc admission.Allocatable, node func() *corev1.Node, pressure func() []corev1.NodeConditionType) admission.Chain {
	enf := admission.EnforcementOf(rt)
	return admission.Chain{admission.Validate(), admission.Pressure(pressure), admission.Sysctls(sysctls), admission.PodOS(),
		admission.SupplementalGroupsPolicy(enf), admission.ResourceFit(alloc), admission.NodePredicates(node),
		admission.AppArmor(enf), admission.Unsupported(enf), admission.ImageVolumes(enf)}
}

// securitySyncOptions: the process runtime's containers are checked again
// at each start (an ephemeral container or an annotation comes after
// admission).
func securitySyncOptions(rt runtime.Runtime) []podsync.Option {
	if rt.Type() == process.Type {
		return []podsync.Option{podsync.WithStartCheck(admission.ProcessStartCheck)}
	}
	return nil
}

// checkSecurity refuses a setting the runtime cannot apply: seccomp-default
// on the process runtime, which would run every pod unconfined.
func (r *Runner) checkSecurity(rt runtime.Runtime) error {
	if r.cfg.SeccompDefault && rt.Type() == process.Type {
		return errors.New("podworkers.seccomp-default is on, but the process runtime applies no seccomp profile (use the cri runtime, or turn it off)")
	}
	return nil
}

// rootDir is the kubelet-style root directory (podworkers.root-dir).
func (r *Runner) rootDir() string {
	if r.cfg.RootDir != "" {
		return r.cfg.RootDir
	}
	return filepath.Join(r.common.DataDir, "kubelet")
}

// seccompRoot is the directory of Localhost seccomp profiles
// (podworkers.seccomp-profile-root, else <root-dir>/seccomp).
func (r *Runner) seccompRoot() string {
	if r.cfg.SeccompProfileRoot != "" {
		return r.cfg.SeccompProfileRoot
	}
	return filepath.Join(r.rootDir(), "seccomp")
}
