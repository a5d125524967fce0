package cri

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/testenv"
)

// An image only in a registry with auth: without credentials its pull
// fails (ErrImagePull, then ImagePullBackOff); with the pod's pull secret
// (dockerconfigjson or dockercfg) it is pulled with them and runs, with the
// kubelet's Pulling and Pulled Events. Once present, the image runs for a
// pod with the same credentials without a pull, and for a pod without them
// only after a pull of its own (which fails). The password is in no log
// line and no Event.
func TestPullWithPullSecret(t *testing.T) {
	testenv.SkipShort(t, "containerd and the registry binary")
	reg, err := testenv.StartRegistry(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	image, err := reg.PushBusybox(t.Context(), "private/busybox", "v1")
	if err != nil {
		t.Fatal(err)
	}
	logs := &apptest.Buffer{}
	r := newRuntime(t, WithPullRecordsDir(t.TempDir()), WithLogger(zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), logs, zap.DebugLevel))))
	t.Cleanup(func() {
		_ = r.is.RemoveImage(context.Background(), &runtimeapi.ImageSpec{Image: image})
		// the pushed image is one of its own: removing it leaves the
		// imported busybox, which the other tests run.
		st, err := r.is.ImageStatus(context.Background(), &runtimeapi.ImageSpec{Image: testenv.BusyboxImage}, false)
		if err != nil || st.GetImage() == nil {
			t.Errorf("removing %s removed %s too (%v)", image, testenv.BusyboxImage, err)
		}
	})
	var mu sync.Mutex
	var events []string
	opts := runtime.StartOptions{ImageEvent: func(eventType, reason, message string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, eventType+" "+reason+" "+message)
	}}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	anon := newPod("anon", true, corev1.Container{Name: "c", Image: image, Command: []string{"sleep", "3600"}})
	cleanupPod(t, anon)
	st, err := r.StartContainer(ctx, anon, &anon.Spec.Containers[0], 0, opts)
	if err == nil || st.Reason != ReasonErrImagePull || !strings.Contains(st.Message, "401 Unauthorized") {
		t.Fatalf("without a pull secret: %+v, %v; want ErrImagePull (401 Unauthorized)", st, err)
	}
	st, err = r.StartContainer(ctx, anon, &anon.Spec.Containers[0], 0, opts)
	if err == nil || st.Reason != ReasonImagePullBackOff || !strings.HasPrefix(st.Message, fmt.Sprintf("Back-off pulling image %q: ErrImagePull: ", image)) {
		t.Fatalf("again without a pull secret: %+v, %v; want ImagePullBackOff", st, err)
	}

	secret := corev1.Secret{Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: reg.DockerConfigJSON()}}
	withSecret := newPod("with-secret", true, corev1.Container{Name: "c", Image: image, ImagePullPolicy: corev1.PullAlways, Command: []string{"sleep", "3600"}})
	cleanupPod(t, withSecret)
	opts.PullSecrets = []corev1.Secret{secret}
	if st := startWith(t, r, withSecret, opts); st.State != runtime.StateRunning {
		t.Fatalf("with the pod's dockerconfigjson secret: %+v", st)
	}
	// a .dockercfg secret whose key names the repository path.
	cfg := fmt.Sprintf(`{"http://%s/private":{"username":%q,"password":%q}}`, reg.Host, reg.User, reg.Password)
	opts.PullSecrets = []corev1.Secret{{Type: corev1.SecretTypeDockercfg, Data: map[string][]byte{corev1.DockerConfigKey: []byte(cfg)}}}
	legacy := newPod("dockercfg", true, corev1.Container{Name: "c", Image: image, ImagePullPolicy: corev1.PullAlways, Command: []string{"sleep", "3600"}})
	cleanupPod(t, legacy)
	if st := startWith(t, r, legacy, opts); st.State != runtime.StateRunning {
		t.Fatalf("with the pod's dockercfg secret: %+v", st)
	}

	// present now: a pod without the credentials may not run it without a
	// pull of its own, which fails; one with them runs it as it is.
	opts.PullSecrets = nil
	other := newPod("other", true, corev1.Container{Name: "c", Image: image, Command: []string{"sleep", "3600"}})
	cleanupPod(t, other)
	st, err = r.StartContainer(ctx, other, &other.Spec.Containers[0], 0, opts)
	if err == nil || st.Reason != ReasonErrImagePull {
		t.Fatalf("the present image for a pod without credentials: %+v, %v; want ErrImagePull", st, err)
	}
	other.Spec.Containers[0].ImagePullPolicy = corev1.PullNever
	if st, err := r.StartContainer(ctx, other, &other.Spec.Containers[0], 0, opts); err == nil || st.Reason != ReasonErrImageNeverPull {
		t.Fatalf("the present image for a pod without credentials, policy Never: %+v, %v; want ErrImageNeverPull", st, err)
	}
	opts.PullSecrets = []corev1.Secret{secret}
	same := newPod("same-credentials", true, corev1.Container{Name: "c", Image: image, Command: []string{"sleep", "3600"}})
	cleanupPod(t, same)
	if st := startWith(t, r, same, opts); st.State != runtime.StateRunning {
		t.Fatalf("the present image with the credentials that pulled it: %+v", st)
	}

	mu.Lock()
	got := strings.Join(events, "\n")
	mu.Unlock()
	if want := fmt.Sprintf("Normal Pulled Container image %q already present on machine and can be accessed by the pod", image); !strings.Contains(got, want) {
		t.Errorf("no %q:\n%s", want, got)
	}
	pulled := regexp.MustCompile(`(?m)^Normal Pulled Successfully pulled image "` + regexp.QuoteMeta(image) +
		`" in [0-9.]+m?s \([0-9.]+m?s including waiting\)\. Image size: [1-9][0-9]* bytes\.$`)
	if n := strings.Count(got, fmt.Sprintf("Normal Pulling Pulling image %q", image)); n != 4 {
		t.Errorf("%d Pulling Events, want 4 (two failed pulls and two pulls):\n%s", n, got)
	}
	if n := len(pulled.FindAllString(got, -1)); n != 2 {
		t.Errorf("%d Pulled Events of the kubelet's form, want 2:\n%s", n, got)
	}
	for what, text := range map[string]string{"log": logs.String(), "Event": got} {
		if strings.Contains(text, reg.Password) {
			t.Errorf("the registry password is in a %s:\n%s", what, text)
		}
	}
	if !strings.Contains(logs.String(), "pulling image") {
		t.Errorf("no pull was logged: the log capture sees nothing:\n%s", logs.String())
	}
}

func startWith(t *testing.T, r *Runtime, p *corev1.Pod, opts runtime.StartOptions) runtime.ContainerStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	st, err := r.StartContainer(ctx, p, &p.Spec.Containers[0], 0, opts)
	if err != nil {
		t.Fatalf("start %s: %+v, %v", p.Name, st, err)
	}
	return st
}

// A credential provider plugin gives the registry's credentials: a pod
// with no pull secret pulls the image only in the registry with auth and
// runs it, and the password is in no log line.
func TestPullWithCredentialProvider(t *testing.T) {
	testenv.SkipShort(t, "containerd and the registry binary")
	reg, err := testenv.StartRegistry(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	image, err := reg.PushBusybox(t.Context(), "private/provided", "v1")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writePlugin(t, dir, "test-registry", fmt.Sprintf(`{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Registry","auth":{%q:{"username":%q,"password":%q}}}`,
		reg.Host, reg.User, reg.Password))
	cfg := writeProviderConfig(t, dir, fmt.Sprintf("providers:\n- name: test-registry\n  matchImages: [%q]\n  defaultCacheDuration: 1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n", reg.Host))
	logs := &apptest.Buffer{}
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), logs, zap.DebugLevel))
	cp, err := LoadCredentialProviders(cfg, dir, log)
	if err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, WithCredentialProviders(cp), WithLogger(log))
	t.Cleanup(func() { _ = r.is.RemoveImage(context.Background(), &runtimeapi.ImageSpec{Image: image}) })
	p := newPod("provided", true, corev1.Container{Name: "c", Image: image, ImagePullPolicy: corev1.PullAlways, Command: []string{"sleep", "3600"}})
	cleanupPod(t, p)
	if st := startWith(t, r, p, runtime.StartOptions{}); st.State != runtime.StateRunning {
		t.Fatalf("with the plugin's credentials: %+v", st)
	}
	if runs(t, dir) != 1 {
		t.Errorf("the plugin ran %d times, want 1", runs(t, dir))
	}
	if text := logs.String(); !strings.Contains(text, "pulling image") || strings.Contains(text, reg.Password) {
		t.Errorf("want the pull logged without the password:\n%s", text)
	}
}
