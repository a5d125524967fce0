package kube

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The host check reads the kernel's AppArmor filesystem and module
// parameter, as the kubelet does.
func TestAppArmorHost(t *testing.T) {
	dir := t.TempDir()
	fsDir, enabled := filepath.Join(dir, "apparmor"), filepath.Join(dir, "enabled")
	if err := appArmorHost(fsDir, enabled); err == nil || err.Error() != "AppArmor is not enabled on the host" {
		t.Errorf("no filesystem: %v", err)
	}
	if err := os.Mkdir(fsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for content, ok := range map[string]bool{"Y\n": true, "N\n": false, "": false} {
		if err := os.WriteFile(enabled, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := appArmorHost(fsDir, enabled); (err == nil) != ok {
			t.Errorf("enabled %q: %v", content, err)
		}
	}
}

func TestAppArmorProfileAndRequired(t *testing.T) {
	rd := &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}
	unconfined := &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
	key := corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix
	pod := func(mod func(p *corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
		mod(p)
		return p
	}
	for _, tc := range []struct {
		name     string
		pod      *corev1.Pod
		want     string
		required bool
	}{
		{"none", pod(func(*corev1.Pod) {}), "", false},
		{"pod", pod(func(p *corev1.Pod) { p.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: rd} }), "RuntimeDefault", true},
		{"pod unconfined", pod(func(p *corev1.Pod) { p.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: unconfined} }), "Unconfined", false},
		{"annotation localhost", pod(func(p *corev1.Pod) { p.Annotations[key+"c"] = "localhost/prof" }), "Localhost/prof", true},
		{"annotation unconfined", pod(func(p *corev1.Pod) { p.Annotations[key+"c"] = "unconfined" }), "Unconfined", false},
		{"annotation of no known form", pod(func(p *corev1.Pod) { p.Annotations[key+"c"] = "bogus" }), "", true},
		{"annotation of another container", pod(func(p *corev1.Pod) { p.Annotations[key+"other"] = "runtime/default" }), "", true},
		{"container over annotation", pod(func(p *corev1.Pod) {
			p.Annotations[key+"c"] = "runtime/default"
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AppArmorProfile: unconfined}
		}), "Unconfined", true},
		{"ephemeral container", pod(func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debug", SecurityContext: &corev1.SecurityContext{AppArmorProfile: rd}}}}
		}), "", true},
	} {
		got := ""
		if prof := AppArmorProfile(tc.pod, &tc.pod.Spec.Containers[0]); prof != nil {
			got = string(prof.Type)
			if prof.LocalhostProfile != nil {
				got += "/" + *prof.LocalhostProfile
			}
		}
		if got != tc.want || AppArmorRequired(tc.pod) != tc.required {
			t.Errorf("%s: profile %q required %v, want %q %v", tc.name, got, AppArmorRequired(tc.pod), tc.want, tc.required)
		}
	}
}
