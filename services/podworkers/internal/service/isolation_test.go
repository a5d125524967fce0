package service

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/testenv"
)

// Pods of the process runtime, with podworkers as root, are kept apart:
// each runs as a uid of its own and reads its own Secret volume, but not
// another pod's Secret file nor its environment (/proc/<pid>/environ,
// where a Secret given as env lives), nor the agent's data directory and
// the credentials kept there; a pod asking for root is refused, its
// container waiting in CreateContainerConfigError with a Failed Event
// that says why.
func TestProcessPodsAreIsolated(t *testing.T) {
	if os.Geteuid() != 0 {
		if testing.Short() {
			t.Skip("needs root: only a root pod worker runs pods as users of their own")
		}
		t.Fatal("this test needs root: only a root pod worker runs pods as users of their own")
	}
	e := newEnv(t, "pw-proc-iso")
	admin := controlPlane(t).Clientset()
	_, secret, account := volumeObjects(t, admin, e.node)
	rootDir := testenv.DataDir(t)
	testenv.OpenWay(t, rootDir)
	e.replicaCS = nodeClientset(t, e.node)
	r := e.startReplica(t, config.RuntimeProcess, func(c *Config) { c.RootDir = rootDir })
	data := r.common.DataDir
	var creds []string
	for _, name := range []string{"kubeconfig", "nats.nk"} {
		f := filepath.Join(data, name)
		if err := os.WriteFile(f, []byte("s3cret-of-the-agent"), 0o600); err != nil {
			t.Fatal(err)
		}
		creds = append(creds, f)
	}
	out := func(p *corev1.Pod, name string) string {
		b, _ := os.ReadFile(filepath.Join(rootDir, "pods", string(p.UID), "volumes", "kubernetes.io~empty-dir", "out", name))
		return string(b)
	}
	withOut := func(p *corev1.Pod, script string) {
		p.Spec.NodeName = e.node
		p.Spec.ServiceAccountName = account
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "out", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		c := &p.Spec.Containers[0]
		c.Command = []string{"sh", "-c", script}
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "out", MountPath: "/out"})
	}
	a := newPod(t, admin, e.node+"-a", func(p *corev1.Pod) {
		withOut(p, `cat etc/secret/password > out/mine; id -u > out/uid; echo $$ > out/pid; exec sleep 3600`)
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}})
		c := &p.Spec.Containers[0]
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "secret", MountPath: "/etc/secret"})
		c.Env = []corev1.EnvVar{{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "password"}}}}
	})
	e.track(a)
	e.send(bus.OpAdd, a)
	eventually(t, 60*time.Second, "pod a reading its own Secret", func() bool { return out(a, "mine") == "s3cret" && out(a, "pid") != "" })

	secretFile := filepath.Join(rootDir, "pods", string(a.UID), "volumes", "kubernetes.io~secret", "secret", "password")
	if b, err := os.ReadFile(secretFile); err != nil || string(b) != "s3cret" {
		t.Fatalf("pod a's Secret file %s: %q %v", secretFile, b, err)
	}
	b := newPod(t, admin, e.node+"-b", func(p *corev1.Pod) {
		withOut(p, fmt.Sprintf(`id -u > out/uid; cat %s > out/file; cat /proc/%s/environ > out/env; cat %s > out/creds; ls %s > out/list; echo done > out/done; exec sleep 3600`,
			secretFile, strings.TrimSpace(out(a, "pid")), strings.Join(creds, " "), data))
	})
	root := int64(0)
	c := newPod(t, admin, e.node+"-root", func(p *corev1.Pod) {
		p.Spec.NodeName = e.node
		p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &root}
	})
	e.track(b, c)
	e.send(bus.OpAdd, b, c)
	eventually(t, 60*time.Second, "pod b's tries", func() bool { return out(b, "done") == "done\n" })
	uidA, uidB := strings.TrimSpace(out(a, "uid")), strings.TrimSpace(out(b, "uid"))
	if n, err := strconv.Atoi(uidA); err != nil || n == 0 || uidA == uidB {
		t.Errorf("pods a and b run as uids %q and %q: want two distinct ones, not root", uidA, uidB)
	}
	for _, name := range []string{"file", "env", "creds", "list"} {
		if got := out(b, name); got != "" {
			t.Errorf("pod b read %s of pod a or of the agent: %q", name, got)
		}
	}

	const refused = "runAsUser 0 is refused"
	eventually(t, 60*time.Second, "the root pod refused with CreateContainerConfigError", func() bool {
		st, _ := e.get(c.UID)
		if st == nil || len(st.ContainerStatuses) == 0 {
			return false
		}
		w := st.ContainerStatuses[0].State.Waiting
		return w != nil && w.Reason == "CreateContainerConfigError" && strings.Contains(w.Message, refused)
	})
	eventually(t, 30*time.Second, "a Failed Event saying why", func() bool {
		evs, err := admin.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", string(c.UID)).String()})
		if err != nil {
			return false
		}
		for _, ev := range evs.Items {
			if ev.Reason == "Failed" && ev.Type == corev1.EventTypeWarning && strings.HasPrefix(ev.Message, "Error: "+refused) {
				return true
			}
		}
		return false
	})
}
