package cri

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/testenv"
)

// runAsNonRoot against containerd: busybox runs as root, so a container
// that asks for non-root without a user of its own does not start (the
// kubelet's CreateContainerConfigError and message); with runAsUser 1000
// it runs, as uid 1000; allowPrivilegeEscalation false sets no_new_privs.
func TestRunAsNonRoot(t *testing.T) {
	r := newRuntime(t)
	yes, no := true, false
	uid := int64(1000)
	refused := shell("refused", "sleep 30")
	refused.SecurityContext = &corev1.SecurityContext{RunAsNonRoot: &yes}
	allowed := shell("allowed", `echo "$(id -u) $(grep NoNewPrivs /proc/self/status | tr -d '\t ')"; sleep 30`)
	allowed.SecurityContext = &corev1.SecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid, AllowPrivilegeEscalation: &no}
	p := newPod("nonroot", true, refused, allowed)
	cleanupPod(t, p)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st, err := r.StartContainer(ctx, p, &p.Spec.Containers[0], 0, runtime.StartOptions{})
	if err == nil || st.Reason != ReasonCreateConfigError || !strings.Contains(st.Message, "container has runAsNonRoot and image will run as root") {
		t.Fatalf("root image with runAsNonRoot: %+v, %v", st, err)
	}
	st = start(t, r, p, 1, 0)
	testenv.Eventually(t, 30*time.Second, "the non-root container's output", func() (bool, string) {
		var b strings.Builder
		_ = r.Logs(ctx, p.UID, "allowed", runtime.LogOptions{TailLines: -1}, &b)
		return b.String() == "1000 NoNewPrivs:1\n", b.String()
	})
}

// The kubelet's rules and messages, without a runtime.
func TestVerifyNonRoot(t *testing.T) {
	yes := true
	zero, some := int64(0), int64(7)
	p := newPod("p", true, corev1.Container{Name: "c"})
	p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: &yes}
	c := &p.Spec.Containers[0]
	for _, tc := range []struct {
		runAs    *int64
		imageUID *int64
		user     string
		want     string
	}{
		{runAs: &zero, want: "container's runAsUser breaks non-root policy"},
		{runAs: &some},
		{imageUID: &some},
		{imageUID: &zero, want: "image will run as root"},
		{want: "image will run as root"},
		{user: "app", want: "image has non-numeric user (app), cannot verify user is non-root"},
	} {
		c.SecurityContext = &corev1.SecurityContext{RunAsUser: tc.runAs}
		err := verifyNonRoot(p, c, tc.imageUID, tc.user)
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc, err, tc.want)
		}
	}
}

// seccomp against containerd, read in /proc/self/status inside the
// container: RuntimeDefault (the pod's) filters (Seccomp 2) and refuses
// unshare(CLONE_NEWUSER), which the default profile allows only with
// CAP_SYS_ADMIN; the container's Unconfined overrides it (Seccomp 0, the
// same call succeeds); a Localhost profile from the seccomp root is
// applied (it refuses mkdir); one that does not exist fails the creation
// with the runtime's error (the kubelet's CreateContainerError). With
// seccompDefault a container that names no profile gets RuntimeDefault.
func TestSeccompProfiles(t *testing.T) {
	root := t.TempDir()
	profile := `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO"}]}`
	if err := os.WriteFile(filepath.Join(root, "deny-mkdir.json"), []byte(profile), 0o644); err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, WithSeccompProfileRoot(root))
	probe := `echo "$(grep '^Seccomp:' /proc/self/status | tr -d '\t ') ` +
		`$(unshare -U true 2>/dev/null && echo unshare-ok || echo unshare-denied) ` +
		`$(mkdir /tmp/d 2>/dev/null && echo mkdir-ok || echo mkdir-denied)"; sleep 30`
	withSeccomp := func(name string, prof *corev1.SeccompProfile) corev1.Container {
		c := shell(name, probe)
		if prof != nil {
			c.SecurityContext = &corev1.SecurityContext{SeccompProfile: prof}
		}
		return c
	}
	local := func(name string) *corev1.SeccompProfile {
		return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &name}
	}
	p := newPod("seccomp", true,
		withSeccomp("default", nil),
		withSeccomp("unconfined", &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}),
		withSeccomp("local", local("deny-mkdir.json")),
		withSeccomp("missing", local("no-such-profile.json")))
	p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	cleanupPod(t, p)
	for i := range 3 {
		start(t, r, p, i, 0)
	}
	st, err := r.StartContainer(t.Context(), p, &p.Spec.Containers[3], 0, runtime.StartOptions{})
	if err == nil || st.Reason != ReasonCreateError || !strings.Contains(st.Message, "no-such-profile.json") {
		t.Errorf("missing Localhost profile: %+v, %v; want %s naming the file", st, err, ReasonCreateError)
	}
	want := map[string]string{
		"default":    "Seccomp:2 unshare-denied mkdir-ok\n",
		"unconfined": "Seccomp:0 unshare-ok mkdir-ok\n",
		"local":      "Seccomp:2 unshare-ok mkdir-denied\n",
	}
	for name, line := range want {
		testenv.Eventually(t, 30*time.Second, name+"'s probe", func() (bool, string) {
			l := logs(t, r, p.UID, name, runtime.LogOptions{})
			return l == line, l
		})
	}

	byDefault := newRuntime(t, WithSeccompDefault(true))
	q := newPod("seccomp-default", true, withSeccomp("none", nil),
		withSeccomp("unconfined", &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}))
	cleanupPod(t, q)
	start(t, byDefault, q, 0, 0)
	start(t, byDefault, q, 1, 0)
	for name, line := range map[string]string{"none": "Seccomp:2 unshare-denied mkdir-ok\n", "unconfined": "Seccomp:0 unshare-ok mkdir-ok\n"} {
		testenv.Eventually(t, 30*time.Second, "seccompDefault: "+name+"'s probe", func() (bool, string) {
			l := logs(t, byDefault, q.UID, name, runtime.LogOptions{})
			return l == line, l
		})
	}
}

// The plain security settings against containerd, read inside each
// container: capabilities dropped and added (CapEff), no_new_privs, a
// read-only root filesystem, the kubelet's /proc masks, users and groups
// (runAsUser, runAsGroup, supplementalGroups, fsGroup), a sysctl, and a
// privileged container with every capability and no mask.
func TestSecurityContextApplied(t *testing.T) {
	r := newRuntime(t)
	yes, no := true, false
	uid, gid, fsGroup := int64(1000), int64(3000), int64(2000)
	probe := `s=/proc/self/status; echo "$(grep -E '^(CapEff|NoNewPrivs):' $s | tr -d '\t ' | tr '\n' ' ')` +
		`ids=$(id -u):$(id -g):$(id -G | tr ' ' ,) sysctl=$(cat /proc/sys/kernel/shm_rmid_forced) ` +
		`$(touch /rootfs-write 2>/dev/null && echo rw || echo ro) $([ -c /proc/keys ] && echo keys-masked || echo keys-open)"; sleep 30`
	dropped := shell("dropped", probe)
	dropped.SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_BIND_SERVICE"}}}
	user := shell("user", probe)
	user.SecurityContext = &corev1.SecurityContext{RunAsUser: &uid, RunAsGroup: &gid}
	privileged := shell("privileged", probe)
	privileged.SecurityContext = &corev1.SecurityContext{Privileged: &yes}
	p := newPod("secctx", true, shell("plain", probe), dropped, user, privileged)
	p.Spec.SecurityContext = &corev1.PodSecurityContext{SupplementalGroups: []int64{1234}, FSGroup: &fsGroup,
		Sysctls: []corev1.Sysctl{{Name: "kernel.shm_rmid_forced", Value: "1"}}}
	cleanupPod(t, p)
	for i := range p.Spec.Containers {
		start(t, r, p, i, 0)
	}
	all := hostCapBnd(t)
	want := map[string][]string{
		"plain":      {"NoNewPrivs:0", "ids=0:0:0,1234,2000", "sysctl=1", "rw", "keys-masked"},
		"dropped":    {"CapEff:0000000000000400", "NoNewPrivs:1", "ro", "keys-masked"},
		"user":       {"CapEff:0000000000000000", "NoNewPrivs:0", "ids=1000:3000:3000,1234,2000", "keys-masked"},
		"privileged": {"CapEff:" + all, "keys-open"},
	}
	for name, tokens := range want {
		testenv.Eventually(t, 30*time.Second, name+"'s probe", func() (bool, string) {
			l := logs(t, r, p.UID, name, runtime.LogOptions{})
			got := strings.Fields(l)
			for _, tok := range tokens {
				if !slices.Contains(got, tok) {
					return false, l
				}
			}
			return true, l
		})
	}
	// the default set is neither empty nor every capability.
	plain := logs(t, r, p.UID, "plain", runtime.LogOptions{})
	if strings.Contains(plain, "CapEff:0000000000000000") || strings.Contains(plain, "CapEff:"+all) {
		t.Errorf("plain container's capabilities: %s", plain)
	}
}

// hostCapBnd is this (root) test's capability bounding set: a privileged
// container's effective set.
func hostCapBnd(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapBnd:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("no CapBnd in /proc/self/status")
	return ""
}

// AppArmor on this host: where the kernel has no AppArmor (this machine) a
// container asking for a profile, by field or by the deprecated
// annotation, is not created and says why (the kubelet's words), never run
// unconfined; where it has, the profile confines the container.
func TestAppArmorOnThisHost(t *testing.T) {
	r := newRuntime(t)
	rd := &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}
	field := shell("field", "cat /proc/self/attr/current; sleep 30")
	field.SecurityContext = &corev1.SecurityContext{AppArmorProfile: rd}
	p := newPod("apparmor", true, field, shell("annotated", "cat /proc/self/attr/current; sleep 30"))
	p.Annotations = map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "annotated": "runtime/default"}
	cleanupPod(t, p)
	hostErr := kube.AppArmorHost()
	for i, c := range p.Spec.Containers {
		st, err := r.StartContainer(t.Context(), p, &p.Spec.Containers[i], 0, runtime.StartOptions{})
		if hostErr != nil {
			if err == nil || st.Reason != ReasonCreateConfigError || st.Message != "Cannot enforce AppArmor: "+hostErr.Error() || st.ID != "" {
				t.Errorf("%s on a host without AppArmor: %+v, %v", c.Name, st, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		testenv.Eventually(t, 30*time.Second, c.Name+" confined", func() (bool, string) {
			l := logs(t, r, p.UID, c.Name, runtime.LogOptions{})
			return strings.Contains(l, "(enforce)"), l
		})
	}
}

// hostUsers false: containerd 1.6 gives no user namespace, so the sandbox
// is not made and the container waits with the kubelet's message.
func TestHostUsersFalseRefused(t *testing.T) {
	r := newRuntime(t)
	no := false
	p := newPod("userns", true, shell("main", "sleep 30"))
	p.Spec.HostUsers = &no
	cleanupPod(t, p)
	st, err := r.StartContainer(t.Context(), p, &p.Spec.Containers[0], 0, runtime.StartOptions{})
	if err == nil || st.Reason != ReasonContainerCreating ||
		st.Message != "Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces" {
		t.Errorf("hostUsers false: %+v, %v", st, err)
	}
	if pods := r.Pods(); slices.ContainsFunc(pods, func(ref runtime.PodRef) bool { return ref.UID == p.UID }) {
		t.Errorf("a sandbox was made for the pod: %+v", pods)
	}
}

// setHostnameAsFQDN with an FQDN over 64 characters: no sandbox is made,
// the container waits with the kubelet's FailedCreatePodSandBox message.
func TestFQDNTooLongRefused(t *testing.T) {
	r := newRuntime(t)
	yes := true
	p := newPod("fqdn", false, shell("main", "sleep 30"))
	p.Spec.Hostname, p.Spec.Subdomain, p.Spec.SetHostnameAsFQDN = strings.Repeat("h", 55), "t", &yes
	cleanupPod(t, p)
	st, err := r.StartContainer(t.Context(), p, &p.Spec.Containers[0], 0, runtime.StartOptions{})
	if err == nil || st.Reason != ReasonContainerCreating ||
		!strings.HasPrefix(st.Message, "Failed to create pod sandbox: failed to construct FQDN from pod hostname and cluster domain, FQDN "+p.Spec.Hostname+".t.") {
		t.Errorf("FQDN too long: %+v, %v", st, err)
	}
	if pods := r.Pods(); slices.ContainsFunc(pods, func(ref runtime.PodRef) bool { return ref.UID == p.UID }) {
		t.Errorf("a sandbox was made for the pod: %+v", pods)
	}
}
