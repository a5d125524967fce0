package service

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/runtime/process"
	"github.com/splitlet/splitlet/libs/runtime/sim"
	"github.com/splitlet/splitlet/services/podworkers/internal/podsync"
)

// waitRejected waits for the pod's Failed status with the reason and a
// message that starts with want, and for the Warning Event of the reason.
func (e *env) waitRejected(t *testing.T, p *corev1.Pod, reason, want string) {
	t.Helper()
	eventually(t, 30*time.Second, p.Name+" rejected with "+reason, func() bool {
		st, _ := e.get(p.UID)
		return st != nil && st.Phase == corev1.PodFailed && st.Reason == reason && strings.HasPrefix(st.Message, want)
	})
	eventually(t, 30*time.Second, reason+" event on "+p.Name, func() bool {
		evs, err := e.cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(p.UID)})
		return err == nil && slices.ContainsFunc(evs.Items, func(ev corev1.Event) bool { return ev.Reason == reason && ev.Type == corev1.EventTypeWarning })
	})
}

// On the process runtime a pod setting a security field it cannot enforce
// is rejected (the field named), a pod asking for AppArmor with the
// kubelet's reason; a plain pod runs; an ephemeral container added to it
// later with such a field waits with CreateContainerConfigError.
func TestProcessRefusesUnenforceableSecurity(t *testing.T) {
	e := newEnv(t, "pw-proc-sec")
	e.startReplica(t, config.RuntimeProcess, nil)
	on := func(mod func(*corev1.Pod)) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.NodeName = e.node
			mod(p)
		}
	}
	seccomp := newPod(t, e.cs, "seccomp", on(func(p *corev1.Pod) {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	}))
	apparmor := newPod(t, e.cs, "apparmor", on(func(p *corev1.Pod) {
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}}
	}))
	plain := newPod(t, e.cs, "plain", on(func(*corev1.Pod) {}))
	e.track(seccomp, apparmor, plain)
	e.send(bus.OpAdd, seccomp, apparmor, plain)
	e.waitRejected(t, seccomp, "PodFeatureUnsupported",
		"Pod was rejected: spec.securityContext.seccompProfile: type RuntimeDefault: not enforced by the process runtime (")
	e.waitRejected(t, apparmor, "AppArmor",
		"Pod was rejected: Cannot enforce AppArmor: the process runtime does not confine containers with AppArmor profiles")
	eventually(t, 30*time.Second, "the plain pod running", func() bool { st, _ := e.get(plain.UID); return containerRunning(st) })

	no := false
	debug := plain.DeepCopy()
	debug.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "debug", Image: "busybox", Command: []string{"sleep", "3600"}, SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no}}}}
	e.send(bus.OpUpdate, debug)
	eventually(t, 30*time.Second, "the ephemeral container refused", func() bool {
		st, _ := e.get(plain.UID)
		if st == nil || len(st.EphemeralContainerStatuses) != 1 {
			return false
		}
		w := st.EphemeralContainerStatuses[0].State.Waiting
		return w != nil && w.Reason == podsync.ReasonCreateContainerConfigError &&
			strings.HasPrefix(w.Message, "spec.ephemeralContainers[0].securityContext.allowPrivilegeEscalation: false: not enforced by the process runtime")
	})
	if st, _ := e.get(plain.UID); !containerRunning(st) {
		t.Errorf("the plain pod's container after the refused ephemeral one: %+v", st.ContainerStatuses)
	}
}

// --runtime=cri on a host without AppArmor (this one): a pod asking for a
// profile is rejected with the kubelet's reason and message, one asking for
// supplementalGroupsPolicy Strict too (containerd 1.6 does not report the
// feature); a RuntimeDefault seccomp pod runs.
func TestCRIRefusesWhatItCannotEnforce(t *testing.T) {
	hostErr := kube.AppArmorHost()
	if hostErr == nil {
		t.Fatal("this test expects a host without AppArmor; the CRI runtime's tests cover a host with it")
	}
	e, _ := criEnv(t, "pw-cri-sec")
	e.startReplica(t, config.RuntimeCRI, nil)
	strict := corev1.SupplementalGroupsPolicyStrict
	on := func(mod func(*corev1.Pod)) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.NodeName = e.node
			e.podDefaults(p)
			mod(p)
		}
	}
	apparmor := newPod(t, e.cs, "cri-apparmor", on(func(p *corev1.Pod) {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}}
	}))
	groups := newPod(t, e.cs, "cri-strict", on(func(p *corev1.Pod) {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{SupplementalGroupsPolicy: &strict}
	}))
	confined := newPod(t, e.cs, "cri-seccomp", on(func(p *corev1.Pod) {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	}))
	e.track(apparmor, groups, confined)
	e.send(bus.OpAdd, apparmor, groups, confined)
	e.waitRejected(t, apparmor, "AppArmor", "Pod was rejected: Cannot enforce AppArmor: "+hostErr.Error())
	e.waitRejected(t, groups, "SupplementalGroupsPolicyNotSupported", "Pod was rejected: SupplementalGroupsPolicy=Strict is not supported in this node")
	eventually(t, time.Minute, "the RuntimeDefault pod running", func() bool { st, _ := e.get(confined.UID); return containerRunning(st) })
}

// seccomp-default cannot be honoured by the process runtime: the replica
// refuses to run with it rather than run every pod unconfined.
func TestSeccompDefaultRefusedOnProcess(t *testing.T) {
	r := &Runner{cfg: &Config{SeccompDefault: true}}
	pr, err := process.New(process.WithRootDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if err := r.checkSecurity(pr); err == nil || !strings.Contains(err.Error(), "podworkers.seccomp-default") {
		t.Errorf("process runtime with seccomp-default: %v", err)
	}
	if err := r.checkSecurity(sim.New()); err != nil {
		t.Errorf("sim runtime with seccomp-default: %v", err)
	}
}
