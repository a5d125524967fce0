package cri

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func dockerConfigJSON(t *testing.T, auths map[string]dockerAuth) corev1.Secret {
	t.Helper()
	data, err := json.Marshal(map[string]any{"auths": auths})
	if err != nil {
		t.Fatal(err)
	}
	return corev1.Secret{Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: data}}
}

// Keys match an image as the kubelet's keyring matches them: host globs
// label by label, the same port, a path prefix; the most specific key
// first; Docker Hub under its legacy key.
func TestKeyringLookup(t *testing.T) {
	legacy := base64.StdEncoding.EncodeToString([]byte("hubuser:hubpass"))
	cfg, _ := json.Marshal(map[string]dockerAuth{"https://index.docker.io/v1/": {Auth: legacy}})
	kr, err := newKeyring([]corev1.Secret{
		dockerConfigJSON(t, map[string]dockerAuth{
			"registry.example:5000":         {Username: "port", Password: "p"},
			"registry.example:5000/team":    {Username: "team", Password: "p"},
			"*.corp.example":                {Username: "glob", Password: "p"},
			"https://plain.example/v2/repo": {Username: "plain", Password: "p"},
		}),
		{Type: corev1.SecretTypeDockercfg, Data: map[string][]byte{corev1.DockerConfigKey: cfg}},
		{Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"x": []byte("not a pull secret")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for image, want := range map[string]string{
		"registry.example:5000/team/app:v1":  "team,port",
		"registry.example:5000/teamx/app:v1": "port",
		"registry.example/team/app:v1":       "",
		"a.corp.example/app":                 "glob",
		"a.b.corp.example/app":               "",
		"plain.example/repo/app":             "plain",
		"plain.example/v2/repo/app":          "",
		"busybox":                            "hubuser",
		"docker.io/library/busybox:1":        "hubuser",
		"quay.io/app":                        "",
	} {
		var got []string
		for _, a := range kr.lookup(image) {
			got = append(got, a.Username)
		}
		if strings.Join(got, ",") != want {
			t.Errorf("%s: %v, want %s", image, got, want)
		}
	}
	if a := kr.lookup("busybox"); len(a) != 1 || a[0].Password != "hubpass" {
		t.Errorf("legacy auth not decoded: %+v", a)
	}
}

// A pull secret that is not JSON fails the lookup without quoting it.
func TestKeyringBadSecretNotQuoted(t *testing.T) {
	s := corev1.Secret{Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths": hunter2-secret`)}}
	s.Namespace, s.Name = "ns", "regcred"
	_, err := newKeyring([]corev1.Secret{s})
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "ns/regcred") {
		t.Fatalf("error %v: want one naming the secret, not quoting it", err)
	}
}

// serialize-image-pulls and max-parallel-image-pulls set the pull slots
// as the kubelet's serial and parallel pullers do.
func TestImagePullSlots(t *testing.T) {
	for _, c := range []struct {
		serial bool
		max    int
		want   int
	}{{true, 0, 1}, {true, 1, 1}, {false, 0, 0}, {false, 3, 3}} {
		var o options
		WithImagePulls(c.serial, c.max)(&o)
		if got := cap(pullSlots(o.pullSlots)); got != c.want {
			t.Errorf("serial %v max %d: %d slots, want %d", c.serial, c.max, got, c.want)
		}
	}
}

// slowPulls is an image service whose pulls take a while; it counts the
// most at once.
type slowPulls struct {
	criapi.ImageManagerService
	mu        sync.Mutex
	now, most int
}

func (s *slowPulls) PullImage(ctx context.Context, image *runtimeapi.ImageSpec, _ *runtimeapi.AuthConfig, _ *runtimeapi.PodSandboxConfig) (string, error) {
	s.mu.Lock()
	s.now++
	s.most = max(s.most, s.now)
	s.mu.Unlock()
	time.Sleep(200 * time.Millisecond) // the pull's duration, not synchronisation
	s.mu.Lock()
	s.now--
	s.mu.Unlock()
	return "sha256:" + image.Image, nil
}

func (s *slowPulls) ImageStatus(context.Context, *runtimeapi.ImageSpec, bool) (*runtimeapi.ImageStatusResponse, error) {
	return &runtimeapi.ImageStatusResponse{}, nil
}

// Serial pulls run one at a time; parallel ones up to the limit.
func TestImagePullsAtOnce(t *testing.T) {
	for _, c := range []struct {
		serial bool
		max    int
		want   int
	}{{true, 0, 1}, {false, 2, 2}, {false, 0, 4}} {
		var o options
		WithImagePulls(c.serial, c.max)(&o)
		is := &slowPulls{}
		r := &Runtime{is: is, pullSlots: pullSlots(o.pullSlots)}
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				if _, _, _, _, err := r.pullWithCredentials(t.Context(), &runtimeapi.ImageSpec{Image: fmt.Sprint(i)}, nil, nil); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if is.most != c.want {
			t.Errorf("serial %v max %d: %d pulls at once, want %d", c.serial, c.max, is.most, c.want)
		}
	}
}
