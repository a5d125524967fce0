package cri

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/splitlet/splitlet/libs/runtime/gc"
	"github.com/splitlet/splitlet/libs/testenv"
)

// fullFs is the runtime with an image filesystem as full as the test says
// (the removal itself is the real runtime's).
type fullFs struct {
	*Runtime
	usage gc.FsUsage
}

func (f *fullFs) ImageFsUsage(context.Context) (gc.FsUsage, error) { return f.usage, nil }

// importImage imports a one-file image of its own into the containerd.
func importImage(t *testing.T, cd *testenv.Containerd, name string) {
	t.Helper()
	if err := cd.ImportUniqueImage(t.Context(), name); err != nil {
		t.Fatal(err)
	}
}

func hasImage(t *testing.T, r *Runtime, name string) bool {
	t.Helper()
	st, err := r.is.ImageStatus(t.Context(), &runtimeapi.ImageSpec{Image: name}, false)
	if err != nil {
		t.Fatal(err)
	}
	return st.GetImage() != nil
}

// Image GC on a containerd of the test's own (the images of other tests'
// containerd are left alone): below the high threshold nothing goes; above
// it an unused imported image goes, while the image a pod uses and the
// sandbox image stay; an image younger than the minimum age stays, and GC
// reports that it could not free enough.
func TestImageGC(t *testing.T) {
	testenv.SkipShort(t, "containerd")
	cd, dir := testenv.OwnContainerd(t, "imagegc")
	r, err := New(t.Context(), WithEndpoint(cd.Endpoint), WithLogRoot(filepath.Join(dir, "logs")), WithContainerLogDir(filepath.Join(dir, "containers")),
		WithPollInterval(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	real, err := r.ImageFsUsage(t.Context())
	if err != nil || real.Capacity <= 0 || real.Available > real.Capacity {
		t.Fatalf("image filesystem usage %+v, %v", real, err)
	}
	const unused = "splitlet.test/unused:1"
	importImage(t, cd, unused)
	p := newPod("uses-busybox", true, shell("c", "sleep 600"))
	st := start(t, r, p, 0, 0)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = r.StopContainer(ctx, st.ID, 0)
		_ = r.RemovePod(ctx, p.UID)
	})

	fs := &fullFs{Runtime: r, usage: gc.FsUsage{Capacity: 1000, Available: 200}}
	policy := gc.ImagePolicy{HighThresholdPercent: 85, LowThresholdPercent: 80}
	young := gc.NewImages(fs, gc.ImagePolicy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: time.Hour}, nil)
	images := gc.NewImages(fs, policy, nil)
	if err := images.GarbageCollect(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !hasImage(t, r, unused) {
		t.Fatal("an image went below the high threshold (80% used)")
	}
	fs.usage.Available = 100 // 90% used: 100 bytes to free
	if err := young.GarbageCollect(t.Context()); !errors.Is(err, gc.ErrNotEnoughSpace) {
		t.Errorf("GC with every image younger than the minimum age: %v, want %v", err, gc.ErrNotEnoughSpace)
	}
	if !hasImage(t, r, unused) {
		t.Fatal("an image younger than the minimum age went")
	}
	if err := images.GarbageCollect(t.Context()); err != nil {
		t.Fatal(err)
	}
	if hasImage(t, r, unused) {
		t.Error("the unused image is still there above the high threshold")
	}
	for _, keep := range []string{testenv.BusyboxImage, cd.SandboxImage} {
		if !hasImage(t, r, keep) {
			t.Errorf("image %s went (in use or the sandbox image)", keep)
		}
	}
	// eviction's call: every unused image; none is left to go.
	importImage(t, cd, unused)
	freed, err := gc.NewImages(r, policy, nil).DeleteUnusedImages(t.Context())
	if err != nil || freed <= 0 || hasImage(t, r, unused) {
		t.Errorf("DeleteUnusedImages freed %d, %v; unused image left: %v", freed, err, hasImage(t, r, unused))
	}
	for _, keep := range []string{testenv.BusyboxImage, cd.SandboxImage} {
		if !hasImage(t, r, keep) {
			t.Errorf("image %s went in DeleteUnusedImages", keep)
		}
	}
}
