package cri

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The mapping of pods' security settings to the CRI, without a runtime.

func seccompOf(t corev1.SeccompProfileType, local string) *corev1.SeccompProfile {
	p := &corev1.SeccompProfile{Type: t}
	if local != "" {
		p.LocalhostProfile = &local
	}
	return p
}

// seccomp: the container's profile over the pod's, RuntimeDefault for
// neither only with seccompDefault, Localhost under the root.
func TestSeccompMapping(t *testing.T) {
	rd, unconf := corev1.SeccompProfileTypeRuntimeDefault, corev1.SeccompProfileTypeUnconfined
	local := corev1.SeccompProfileTypeLocalhost
	for _, tc := range []struct {
		name      string
		pod, ctr  *corev1.SeccompProfile
		byDefault bool
		want      runtimeapi.SecurityProfile_ProfileType
		ref, err  string
	}{
		{name: "none", want: runtimeapi.SecurityProfile_Unconfined},
		{name: "none, seccompDefault", byDefault: true, want: runtimeapi.SecurityProfile_RuntimeDefault},
		{name: "pod", pod: seccompOf(rd, ""), want: runtimeapi.SecurityProfile_RuntimeDefault},
		{name: "container over pod", pod: seccompOf(rd, ""), ctr: seccompOf(unconf, ""), want: runtimeapi.SecurityProfile_Unconfined},
		{name: "unconfined over seccompDefault", ctr: seccompOf(unconf, ""), byDefault: true, want: runtimeapi.SecurityProfile_Unconfined},
		{name: "localhost", pod: seccompOf(local, "prof/audit.json"), want: runtimeapi.SecurityProfile_Localhost, ref: "/root/seccomp/prof/audit.json"},
		{name: "localhost without a name", ctr: seccompOf(local, ""), err: "localhostProfile must be set"},
		{name: "localhost out of the root", ctr: seccompOf(local, "../../etc/x.json"), err: "not a path inside the seccomp profile root"},
		{name: "localhost absolute", ctr: seccompOf(local, "/etc/x.json"), err: "not a path inside the seccomp profile root"},
	} {
		p := newPod("p", true, corev1.Container{Name: "c"})
		if tc.pod != nil {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: tc.pod}
		}
		if tc.ctr != nil {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{SeccompProfile: tc.ctr}
		}
		s := security{seccompRoot: "/root/seccomp", seccompDefault: tc.byDefault}
		sc := securityContext(p, &p.Spec.Containers[0])
		err := s.container(p, &p.Spec.Containers[0], sc)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || sc.Seccomp.GetProfileType() != tc.want || sc.Seccomp.GetLocalhostRef() != tc.ref {
			t.Errorf("%s: %v %v, want %v %q", tc.name, sc.Seccomp, err, tc.want, tc.ref)
		}
	}
}

// AppArmor: passed on where the host has it (the container's field over
// the annotation over the pod's), refused where it has not, unconfined
// passed on either way.
func TestAppArmorMapping(t *testing.T) {
	name := "k8s-deny-write"
	enabled := security{}
	disabled := security{appArmor: errors.New("AppArmor is not enabled on the host")}
	for _, tc := range []struct {
		name       string
		s          security
		pod, ctr   *corev1.AppArmorProfile
		annotation string
		want       *runtimeapi.SecurityProfile
		old, err   string
	}{
		{name: "none", s: disabled},
		{name: "pod", s: enabled, pod: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault},
			want: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, old: "runtime/default"},
		{name: "annotation over pod", s: enabled, pod: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault},
			annotation: "localhost/" + name, want: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: name}, old: "localhost/" + name},
		{name: "container over annotation", s: enabled, annotation: "runtime/default", ctr: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined},
			want: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, old: "unconfined"},
		{name: "unconfined without AppArmor", s: disabled, ctr: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined},
			want: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, old: "unconfined"},
		{name: "runtime default without AppArmor", s: disabled, ctr: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault},
			err: "Cannot enforce AppArmor: AppArmor is not enabled on the host"},
		{name: "annotation without AppArmor", s: disabled, annotation: "runtime/default", err: "Cannot enforce AppArmor"},
		{name: "localhost without a name", s: enabled, ctr: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost},
			err: "missing localhost apparmor profile name"},
	} {
		p := newPod("p", true, corev1.Container{Name: "c"})
		if tc.pod != nil {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: tc.pod}
		}
		if tc.ctr != nil {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AppArmorProfile: tc.ctr}
		}
		if tc.annotation != "" {
			p.Annotations = map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "c": tc.annotation}
		}
		sc := securityContext(p, &p.Spec.Containers[0])
		err := tc.s.container(p, &p.Spec.Containers[0], sc)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || sc.Apparmor.String() != tc.want.String() || sc.ApparmorProfile != tc.old {
			t.Errorf("%s: %v %q %v, want %v %q", tc.name, sc.Apparmor, sc.ApparmorProfile, err, tc.want, tc.old)
		}
	}
}

// SELinux (the container's label over the pod's), the kubelet's /proc
// masks, Unmasked refused, the groups policy; the sandbox's context.
func TestSecurityContextMapping(t *testing.T) {
	strict := corev1.SupplementalGroupsPolicyStrict
	fsGroup := int64(2000)
	p := newPod("p", true, corev1.Container{Name: "c"}, corev1.Container{Name: "d"})
	p.Spec.SecurityContext = &corev1.PodSecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Type: "pod_t", Level: "s0:c1,c2"},
		SupplementalGroups: []int64{1234}, FSGroup: &fsGroup, SupplementalGroupsPolicy: &strict}
	p.Spec.Containers[1].SecurityContext = &corev1.SecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Type: "ctr_t"}}
	var s security
	for i, want := range []*runtimeapi.SELinuxOption{{Type: "pod_t", Level: "s0:c1,c2"}, {Type: "ctr_t"}} {
		c := &p.Spec.Containers[i]
		sc := securityContext(p, c)
		if err := s.container(p, c, sc); err != nil {
			t.Fatal(err)
		}
		if sc.SelinuxOptions.String() != want.String() {
			t.Errorf("%s: SELinux %v, want %v", c.Name, sc.SelinuxOptions, want)
		}
		if !slices.Contains(sc.MaskedPaths, "/proc/kcore") || !slices.Contains(sc.MaskedPaths, "/sys/devices/virtual/powercap") ||
			!slices.Contains(sc.ReadonlyPaths, "/proc/sys") {
			t.Errorf("%s: masked %v, read-only %v", c.Name, sc.MaskedPaths, sc.ReadonlyPaths)
		}
		if sc.SupplementalGroupsPolicy != runtimeapi.SupplementalGroupsPolicy_Strict || !slices.Equal(sc.SupplementalGroups, []int64{1234, 2000}) {
			t.Errorf("%s: groups %v policy %v", c.Name, sc.SupplementalGroups, sc.SupplementalGroupsPolicy)
		}
	}
	unmasked := corev1.UnmaskedProcMount
	p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{ProcMount: &unmasked}
	if err := s.container(p, &p.Spec.Containers[0], securityContext(p, &p.Spec.Containers[0])); err == nil || !strings.Contains(err.Error(), "procMount Unmasked") {
		t.Errorf("procMount Unmasked: %v", err)
	}

	sb := &runtimeapi.LinuxSandboxSecurityContext{}
	s.sandbox(p, sb)
	if sb.Seccomp.GetProfileType() != runtimeapi.SecurityProfile_RuntimeDefault || sb.SelinuxOptions.GetType() != "pod_t" ||
		!slices.Equal(sb.SupplementalGroups, []int64{2000, 1234}) || sb.SupplementalGroupsPolicy != runtimeapi.SupplementalGroupsPolicy_Strict {
		t.Errorf("sandbox: %v", sb)
	}
}

// hostUsers false: no sandbox, with the kubelet's message when the CRI
// runtime reports no user namespaces (containerd 1.6 reports none).
func TestUserNamespaceRefused(t *testing.T) {
	no := false
	p := newPod("p", true, corev1.Container{Name: "c"})
	var s security
	if err := s.checkSandbox(p); err != nil {
		t.Fatalf("hostUsers unset: %v", err)
	}
	p.Spec.HostUsers = &no
	if err := s.checkSandbox(p); err == nil || err.Error() != "can't set `spec.hostUsers: false`, runtime does not support user namespaces" {
		t.Errorf("hostUsers false: %v", err)
	}
	s.userNamespaces = true
	if err := s.checkSandbox(p); err == nil {
		t.Error("hostUsers false, a runtime with user namespaces: admitted, but no mapping is made")
	}
}

// The features a CRI runtime reports: the default handler's user
// namespaces and the groups policy; none from a runtime that reports
// nothing (containerd 1.6).
func TestReadFeatures(t *testing.T) {
	for _, tc := range []struct {
		resp        *runtimeapi.StatusResponse
		userns, sgp bool
	}{
		{resp: &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{}}},
		{resp: &runtimeapi.StatusResponse{
			RuntimeHandlers: []*runtimeapi.RuntimeHandler{{Name: "kata"}, {Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{UserNamespaces: true}}},
			Features:        &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: true}}, userns: true, sgp: true},
	} {
		var s security
		err := s.readFeatures(t.Context(), func(context.Context, bool) (*runtimeapi.StatusResponse, error) { return tc.resp, nil })
		if err != nil || s.userNamespaces != tc.userns || s.groupsPolicy != tc.sgp {
			t.Errorf("%v: userns %v groups policy %v (%v)", tc.resp, s.userNamespaces, s.groupsPolicy, err)
		}
	}
}
