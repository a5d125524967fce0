package admission

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/runtime/process"
	"github.com/splitlet/splitlet/libs/runtime/sim"
	"github.com/splitlet/splitlet/services/podworkers/internal/fakeruntime"
)

func securityPod(mod func(p *corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	mod(p)
	return p
}

func containerSC(sc *corev1.SecurityContext) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext = sc }
}

func podSC(sc *corev1.PodSecurityContext) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.SecurityContext = sc }
}

// AppArmor: the kubelet's reason and message where profiles are not
// applied; unconfined and running pods pass; an empty Localhost name is
// refused where they are.
func TestAppArmorAdmission(t *testing.T) {
	off := Enforcement{AppArmor: errors.New("AppArmor is not enabled on the host")}
	on := Enforcement{}
	rd := &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}
	for _, tc := range []struct {
		name   string
		e      Enforcement
		pod    *corev1.Pod
		reject string
	}{
		{"none", off, securityPod(func(*corev1.Pod) {}), ""},
		{"pod field", off, securityPod(podSC(&corev1.PodSecurityContext{AppArmorProfile: rd})), "Cannot enforce AppArmor: AppArmor is not enabled on the host"},
		{"container field", off, securityPod(containerSC(&corev1.SecurityContext{AppArmorProfile: rd})), "Cannot enforce AppArmor: AppArmor is not enabled on the host"},
		{"annotation", off, securityPod(func(p *corev1.Pod) {
			p.Annotations = map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "c": "localhost/x"}
		}), "Cannot enforce AppArmor: AppArmor is not enabled on the host"},
		{"unconfined", off, securityPod(containerSC(&corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}})), ""},
		{"running", off, securityPod(func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: rd}
			p.Status.Phase = corev1.PodRunning
		}), ""},
		{"applied", on, securityPod(podSC(&corev1.PodSecurityContext{AppArmorProfile: rd})), ""},
		{"empty localhost", on, securityPod(containerSC(&corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost}})),
			`Cannot enforce AppArmor: invalid empty AppArmor profile name (container "c")`},
	} {
		r := AppArmor(tc.e).Admit(&Attributes{Pod: tc.pod})
		if tc.reject == "" && !r.Admit || tc.reject != "" && (r.Admit || r.Reason != ReasonAppArmor || r.Message != tc.reject) {
			t.Errorf("%s: %+v, want rejection %q", tc.name, r, tc.reject)
		}
	}
}

// supplementalGroupsPolicy Strict: refused with the kubelet's reason and
// message on a runtime that does not apply it.
func TestSupplementalGroupsPolicyAdmission(t *testing.T) {
	strict, merge := corev1.SupplementalGroupsPolicyStrict, corev1.SupplementalGroupsPolicyMerge
	for _, tc := range []struct {
		policy    *corev1.SupplementalGroupsPolicy
		supported bool
		admit     bool
	}{{nil, false, true}, {&merge, false, true}, {&strict, false, false}, {&strict, true, true}} {
		p := securityPod(podSC(&corev1.PodSecurityContext{SupplementalGroupsPolicy: tc.policy}))
		r := SupplementalGroupsPolicy(Enforcement{SupplementalGroupsPolicy: tc.supported}).Admit(&Attributes{Pod: p})
		if r.Admit != tc.admit || !r.Admit && (r.Reason != "SupplementalGroupsPolicyNotSupported" || r.Message != "SupplementalGroupsPolicy=Strict is not supported in this node") {
			t.Errorf("%+v: %+v", tc, r)
		}
	}
}

// Every security field the process runtime cannot enforce is refused,
// naming the field; what it does (or what asks for nothing) passes.
func TestProcessUnsupported(t *testing.T) {
	yes, no := true, false
	gid, uid := int64(3000), int64(1000)
	rd := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	unconfined := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
	dflt, unmasked := corev1.DefaultProcMount, corev1.UnmaskedProcMount
	strict := corev1.SupplementalGroupsPolicyStrict
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		field string
	}{
		{"nothing", securityPod(func(*corev1.Pod) {}), ""},
		{"what it enforces or asks nothing", securityPod(func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &uid, RunAsNonRoot: &yes, SeccompProfile: unconfined,
				SELinuxOptions: &corev1.SELinuxOptions{}, SupplementalGroupsPolicy: &strict}
			p.Spec.HostUsers = &yes
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &no, AllowPrivilegeEscalation: &yes,
				ReadOnlyRootFilesystem: &no, ProcMount: &dflt, Capabilities: &corev1.Capabilities{}}
		}), ""},
		{"pod seccomp", securityPod(podSC(&corev1.PodSecurityContext{SeccompProfile: rd})), "spec.securityContext.seccompProfile: type RuntimeDefault"},
		{"pod seccomp overridden", securityPod(func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: rd}
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{SeccompProfile: unconfined}
		}), ""},
		{"container seccomp", securityPod(containerSC(&corev1.SecurityContext{SeccompProfile: rd})), "spec.containers[0].securityContext.seccompProfile: type RuntimeDefault"},
		{"init container seccomp", securityPod(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "i", SecurityContext: &corev1.SecurityContext{
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost}}}}
		}), "spec.initContainers[0].securityContext.seccompProfile: type Localhost"},
		{"pod SELinux", securityPod(podSC(&corev1.PodSecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Level: "s0:c1"}})), "spec.securityContext.seLinuxOptions"},
		{"container SELinux", securityPod(containerSC(&corev1.SecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Type: "t"}})), "spec.containers[0].securityContext.seLinuxOptions"},
		{"privileged", securityPod(containerSC(&corev1.SecurityContext{Privileged: &yes})), "spec.containers[0].securityContext.privileged: true"},
		{"capabilities add", securityPod(containerSC(&corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}})),
			"spec.containers[0].securityContext.capabilities.add: NET_ADMIN"},
		{"capabilities drop", securityPod(containerSC(&corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}})),
			"spec.containers[0].securityContext.capabilities.drop: ALL"},
		{"no privilege escalation", securityPod(containerSC(&corev1.SecurityContext{AllowPrivilegeEscalation: &no})),
			"spec.containers[0].securityContext.allowPrivilegeEscalation: false"},
		{"read-only root", securityPod(containerSC(&corev1.SecurityContext{ReadOnlyRootFilesystem: &yes})), "spec.containers[0].securityContext.readOnlyRootFilesystem: true"},
		{"procMount Unmasked", securityPod(func(p *corev1.Pod) {
			p.Spec.HostUsers = &no
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{ProcMount: &unmasked}
		}), "spec.hostUsers: false"},
		{"sysctls", securityPod(podSC(&corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: "kernel.shm_rmid_forced", Value: "1"}}})),
			"spec.securityContext.sysctls: kernel.shm_rmid_forced=1"},
		{"supplementalGroups", securityPod(podSC(&corev1.PodSecurityContext{SupplementalGroups: []int64{5}})), "spec.securityContext.supplementalGroups: [5]"},
		{"fsGroup", securityPod(podSC(&corev1.PodSecurityContext{FSGroup: &gid})), "spec.securityContext.fsGroup: 3000"},
		{"host port as the container port", securityPod(ports(corev1.ContainerPort{ContainerPort: 80}, corev1.ContainerPort{ContainerPort: 81, HostPort: 81, HostIP: "0.0.0.0"})), ""},
		{"host port mapped to another", securityPod(ports(corev1.ContainerPort{ContainerPort: 80}, corev1.ContainerPort{ContainerPort: 80, HostPort: 8080})), "spec.containers[0].ports[1].hostPort: 8080"},
		{"host port on one address", securityPod(ports(corev1.ContainerPort{ContainerPort: 80, HostPort: 80, HostIP: "127.0.0.1"})), "spec.containers[0].ports[0].hostIP: 127.0.0.1"},
		{"ephemeral-storage limit", securityPod(func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("1Gi")}
		}), "spec.containers[0].resources.limits.ephemeral-storage: 1Gi"},
		{"runtimeClassName", securityPod(func(p *corev1.Pod) {
			class := "gvisor"
			p.Spec.RuntimeClassName = &class
		}), "spec.runtimeClassName: gvisor"},
		{"ephemeral-storage request only", securityPod(func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("1Gi")}
		}), ""},
	} {
		r := Unsupported(Enforcement{Unsupported: ProcessUnsupported}).Admit(&Attributes{Pod: tc.pod})
		if tc.field == "" && !r.Admit ||
			tc.field != "" && (r.Admit || r.Reason != ReasonPodFeatureUnsupported || !strings.HasPrefix(r.Message, tc.field) || !strings.Contains(r.Message, "not enforced by the process runtime (")) {
			t.Errorf("%s: %+v, want %q", tc.name, r, tc.field)
		}
	}
}

// ports gives the pod's first container the ports.
func ports(ps ...corev1.ContainerPort) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Containers[0].Ports = ps }
}

// The start check sees what comes after admission: an ephemeral container
// and an AppArmor annotation.
func TestProcessStartCheck(t *testing.T) {
	no := false
	p := securityPod(func(p *corev1.Pod) {
		p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debug", SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no}}}}
	})
	if err := ProcessStartCheck(p, &p.Spec.Containers[0]); err != nil {
		t.Errorf("plain container: %v", err)
	}
	debug := corev1.Container(p.Spec.EphemeralContainers[0].EphemeralContainerCommon)
	if err := ProcessStartCheck(p, &debug); err == nil || !strings.HasPrefix(err.Error(), "spec.ephemeralContainers[0].securityContext.allowPrivilegeEscalation: false") {
		t.Errorf("ephemeral container: %v", err)
	}
	p.Annotations = map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "c": "runtime/default"}
	if err := ProcessStartCheck(p, &p.Spec.Containers[0]); err == nil || !strings.HasPrefix(err.Error(), "Cannot enforce AppArmor: ") {
		t.Errorf("AppArmor annotation: %v", err)
	}
}

// What each runtime is taken to enforce.
func TestEnforcementOf(t *testing.T) {
	if e := EnforcementOf(sim.New()); e.AppArmor != nil || !e.SupplementalGroupsPolicy || e.Unsupported != nil {
		t.Errorf("sim: %+v", e)
	}
	pr, err := process.New(process.WithRootDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if e := EnforcementOf(pr); e.AppArmor == nil || e.Unsupported == nil {
		t.Errorf("process: %+v", e)
	}
	if e := EnforcementOf(fakeruntime.New()); e.AppArmor == nil || e.SupplementalGroupsPolicy || e.Unsupported != nil {
		t.Errorf("a runtime that reports nothing: %+v", e)
	}
}

func TestImageVolumesAdmission(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "x"}}}}}}
	if r := ImageVolumes(Enforcement{Runtime: "sim"}).Admit(&Attributes{Pod: p}); r.Admit || r.Reason != ReasonPodFeatureUnsupported ||
		r.Message != `volume "v": image volumes are not supported by the sim runtime (they need the cri runtime)` {
		t.Errorf("sim: %+v", r)
	}
	if r := ImageVolumes(Enforcement{Runtime: "cri", ImageVolumes: true}).Admit(&Attributes{Pod: p}); !r.Admit {
		t.Errorf("a runtime with image volumes: %+v", r)
	}
	if r := ImageVolumes(Enforcement{Runtime: "sim"}).Admit(&Attributes{Pod: &corev1.Pod{}}); !r.Admit {
		t.Errorf("a pod without image volumes: %+v", r)
	}
	if e := EnforcementOf(sim.New()); e.ImageVolumes || e.Runtime != sim.Type {
		t.Errorf("sim: %+v", e)
	}
}
