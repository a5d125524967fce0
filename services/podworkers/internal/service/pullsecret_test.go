package service

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/runtime/cri"
	"github.com/splitlet/splitlet/libs/testenv"
)

// An image only in a registry with auth runs with the pod's
// imagePullSecret and with its service account's (which the API server's
// ServiceAccount admission copies into the pod), the replica running as
// the node under the Node authorizer; without a secret the pod waits with
// ErrImagePull, then ImagePullBackOff. The Events are the kubelet's, and
// the registry password is in no log line and no Event.
func TestCRIImagePullSecrets(t *testing.T) {
	e, cd := criEnv(t, "pw-pullsecret")
	// a control plane of its own, with ServiceAccount admission.
	cp, err := testenv.StartControlPlane(t.Context(), testenv.ControlPlaneOptions{ServiceAccountAdmission: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	admin := cp.Clientset()
	e.cs = admin
	e.replicaCS = clientsetAs(t, cp, "system:node:"+e.node, "system:nodes")
	logs := &apptest.Buffer{}
	e.logSink = logs

	reg, err := testenv.StartRegistry(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	image, err := reg.PushBusybox(t.Context(), "private/busybox", "v1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeImage(t, cd.Endpoint, image) })
	pullSecretObjects(t, admin, reg)
	e.startReplica(t, config.RuntimeCRI, nil)

	pod := func(name, account string, secrets ...string) *corev1.Pod {
		return newPod(t, admin, name, func(p *corev1.Pod) {
			p.Spec.NodeName = e.node
			p.Spec.HostNetwork = true
			p.Spec.ServiceAccountName = account
			p.Spec.Containers[0].Image = image
			p.Spec.Containers[0].ImagePullPolicy = corev1.PullAlways
			for _, s := range secrets {
				p.Spec.ImagePullSecrets = append(p.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
			}
		})
	}
	anon := pod("pull-anon", "plain")
	own := pod("pull-own-secret", "plain", "regcred")
	viaSA := pod("pull-sa-secret", "puller")
	if len(viaSA.Spec.ImagePullSecrets) != 1 || viaSA.Spec.ImagePullSecrets[0].Name != "regcred" {
		t.Fatalf("ServiceAccount admission gave the pod imagePullSecrets %v, want regcred", viaSA.Spec.ImagePullSecrets)
	}
	e.track(anon, own, viaSA)
	e.send(bus.OpAdd, anon, own, viaSA)

	for _, p := range []*corev1.Pod{own, viaSA} {
		eventually(t, 2*time.Minute, p.Name+" running", func() bool { st, _ := e.get(p.UID); return containerRunning(st) })
		wantPullEvents(t, admin, p, image)
	}
	waiting := func(reason string) func() bool {
		return func() bool {
			st, _ := e.get(anon.UID)
			return st != nil && len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Waiting != nil &&
				st.ContainerStatuses[0].State.Waiting.Reason == reason
		}
	}
	eventually(t, time.Minute, "the pod without a secret waiting with ErrImagePull", func() bool { return e.sawWaiting(anon.UID, cri.ReasonErrImagePull) })
	eventually(t, time.Minute, "the pod without a secret waiting with ImagePullBackOff", waiting(cri.ReasonImagePullBackOff))
	wantEvent(t, admin, anon, "Warning", "Failed", regexp.QuoteMeta(fmt.Sprintf("Failed to pull image %q: ", image))+".*401 Unauthorized")
	wantEvent(t, admin, anon, "Warning", "Failed", "^Error: ErrImagePull$")
	wantEvent(t, admin, anon, "Normal", "BackOff", "^"+regexp.QuoteMeta(fmt.Sprintf("Back-off pulling image %q", image))+"$")
	wantEvent(t, admin, anon, "Warning", "Failed", "^Error: ImagePullBackOff$")

	evs, err := admin.CoreV1().Events("default").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		if strings.Contains(ev.Message, reg.Password) {
			t.Errorf("Event %s %q carries the registry password", ev.Reason, ev.Message)
		}
	}
	if text := logs.String(); !strings.Contains(text, "pulling image") {
		t.Errorf("the log capture saw no pull:\n%s", text)
	} else if strings.Contains(text, reg.Password) {
		t.Errorf("the registry password is in the replica's log:\n%s", text)
	}
}

// removeImage removes an image the test pulled from the containerd.
func removeImage(t *testing.T, endpoint, image string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	is, err := remote.NewRemoteImageService(ctx, endpoint, time.Minute, nil, false)
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	defer is.Close(ctx)
	if err := is.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: image}); err != nil {
		t.Logf("cleanup: remove %s: %v", image, err)
	}
}

// pullSecretObjects creates regcred (the registry's account, a
// kubernetes.io/dockerconfigjson Secret), the service account plain and
// the service account puller whose imagePullSecrets name regcred.
func pullSecretObjects(t *testing.T, cs kubernetes.Interface, reg *testenv.Registry) {
	t.Helper()
	ctx := t.Context()
	if _, err := cs.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "regcred"},
		Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: reg.DockerConfigJSON()}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	no := false
	for name, secrets := range map[string][]corev1.LocalObjectReference{"plain": nil, "puller": {{Name: "regcred"}}} {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}, ImagePullSecrets: secrets, AutomountServiceAccountToken: &no}
		if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func clientsetAs(t *testing.T, cp *testenv.ControlPlane, user string, groups ...string) kubernetes.Interface {
	t.Helper()
	cfg, err := cp.ClientConfig(user, groups...)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// wantPullEvents: the kubelet's Pulling and Pulled Events of the pod's pull.
func wantPullEvents(t *testing.T, cs kubernetes.Interface, p *corev1.Pod, image string) {
	t.Helper()
	wantEvent(t, cs, p, "Normal", "Pulling", "^"+regexp.QuoteMeta(fmt.Sprintf("Pulling image %q", image))+"$")
	wantEvent(t, cs, p, "Normal", "Pulled", "^"+regexp.QuoteMeta(fmt.Sprintf("Successfully pulled image %q in ", image))+
		`[0-9.]+m?s \([0-9.]+m?s including waiting\)\. Image size: [1-9][0-9]* bytes\.$`)
}

// wantEvent waits for an Event on the pod of the type and reason whose
// message matches the pattern.
func wantEvent(t *testing.T, cs kubernetes.Interface, p *corev1.Pod, eventType, reason, pattern string) {
	t.Helper()
	re := regexp.MustCompile(pattern)
	deadline := time.Now().Add(time.Minute)
	for {
		evs, err := cs.CoreV1().Events("default").List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(p.UID)})
		var seen []string
		if err == nil {
			for _, ev := range evs.Items {
				if ev.Type == eventType && ev.Reason == reason && re.MatchString(ev.Message) {
					return
				}
				seen = append(seen, ev.Type+" "+ev.Reason+" "+ev.Message)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s Event %s matching %q on %s; seen (%v):\n%s", eventType, reason, pattern, p.Name, err, strings.Join(seen, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
