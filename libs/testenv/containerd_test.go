package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
)

// A containerd answers (the host's or one started here) and knows the
// images built here, under the names pods and the CRI plugin use.
func TestEnsureContainerd(t *testing.T) {
	SkipShort(t, "containerd (root to start one)")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cd, err := EnsureContainerd(ctx, ContainerdOptions{})
	if err != nil {
		t.Fatalf("containerd: %v", err)
	}
	defer cd.Stop()
	is, err := remote.NewRemoteImageService(ctx, cd.Endpoint, 10*time.Second, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"busybox", BusyboxImage, cd.SandboxImage} {
		st, err := is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: name}, false)
		if err != nil || st.GetImage() == nil {
			t.Errorf("image %s: %v, %v", name, st, err)
		}
	}
	// Building again gives the same digests: a second import changes nothing.
	a, err := BuildCRIImages(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := BuildCRIImages(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if sum(t, a[i]) != sum(t, b[i]) {
			t.Errorf("%s is not reproducible", a[i])
		}
	}
}

func sum(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}
