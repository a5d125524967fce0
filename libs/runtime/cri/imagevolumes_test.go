package cri

import (
	"errors"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/testenv"
)

// An image volume whose pod went while no pod worker ran (its sandbox
// removed behind the back of a runtime that was then killed) is found by
// its view's key at the next garbage collection of a new runtime:
// unmounted and its view removed. While mounted, its image counts in use
// for image GC.
func TestImageVolumeLeftoverSwept(t *testing.T) {
	r := newRuntime(t)
	dir := t.TempDir()
	testenv.OpenWay(t, dir)
	target := filepath.Join(dir, "volumes", "kubernetes.io~image", "bb")
	p := newPod("imagevol-left", true, shell("c", `test -x /vol/bin/busybox && sleep 3600`))
	cleanupPod(t, p)
	ctx := t.Context()
	opts := runtime.StartOptions{Mounts: []runtime.Mount{{ContainerPath: "/vol", HostPath: target, Volume: "bb",
		Image: &runtime.ImageMount{Reference: "busybox", PullPolicy: corev1.PullIfNotPresent}}}}
	st, err := r.StartContainer(ctx, p, &p.Spec.Containers[0], 0, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.ReleaseImageVolumes(ctx, p.UID) })
	if on, _ := mountinfo.Mounted(target); !on {
		t.Fatalf("%s not mounted", target)
	}
	views := func(rt *Runtime) []string {
		list, err := rt.imageVolumeViews(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, v := range list {
			if strings.Contains(v.GetName(), string(p.UID)) {
				out = append(out, v.GetName())
			}
		}
		return out
	}
	if got := views(r); len(got) != 1 {
		t.Fatalf("views %v, want one", got)
	}
	// containerd itself picks a pod's views by name: another pod's filter
	// lists none, this pod's its one.
	if n := listedByContainerd(t, r, viewPrefix+"no-such-pod/"); n != 0 {
		t.Errorf("containerd listed %d snapshots under another pod's filter, want 0", n)
	}
	if n := listedByContainerd(t, r, viewPrefix+string(p.UID)+"/"); n != 1 {
		t.Errorf("containerd listed %d snapshots under the pod's filter, want 1", n)
	}
	if own, err := r.imageVolumeViews(ctx, p.UID); err != nil || len(own) != 1 {
		t.Errorf("the pod's views: %d (%v), want 1", len(own), err)
	}
	used, err := r.ImagesInUse(ctx)
	if err != nil {
		t.Fatal(err)
	}
	img, err := r.is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: "busybox"}, false)
	if err != nil || !used[img.GetImage().GetId()] {
		t.Errorf("the image volume's image %s is not in use (%v)", img.GetImage().GetId(), err)
	}

	// the pod goes behind the runtime's back, then the runtime is killed.
	if err := r.StopContainer(ctx, st.ID, 0); err != nil {
		t.Fatal(err)
	}
	for _, sb := range sandboxesOf(t, r, p.UID) {
		if err := r.rs.StopPodSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if err := r.rs.RemovePodSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	_ = r.Close()

	r2 := newRuntime(t)
	if got := views(r2); len(got) != 1 {
		t.Fatalf("views %v after the restart, want the one left", got)
	}
	if err := r2.CollectContainers(ctx, DefaultContainerPolicy, false); err != nil {
		t.Fatal(err)
	}
	if got := views(r2); len(got) != 0 {
		t.Errorf("views %v left after garbage collection", got)
	}
	testenv.EventuallyTrue(t, 10*time.Second, "the leftover unmounted", func() bool { on, _ := mountinfo.Mounted(target); return !on })
}

// listedByContainerd counts the snapshots containerd lists under the
// filter of prefix, before any check of this package.
func listedByContainerd(t *testing.T, r *Runtime, prefix string) int {
	t.Helper()
	snaps, snapshotter, err := r.snapshots(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	stream, err := snaps.List(nsCtx(t.Context()), &snapshotsapi.ListSnapshotsRequest{Snapshotter: snapshotter, Filters: viewsFilters(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
		n += len(resp.GetInfo())
	}
}

func TestViewsFilters(t *testing.T) {
	if got, want := viewsFilters(viewPrefix+"0f3c-9a_b/"), []string{`name~="^splitlet[.]io/image-volume/0f3c-9a[_]b/"`}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	for _, bad := range []string{`a"b`, `a\b`, "a]b", "a b"} {
		if got := viewsFilters(viewPrefix + bad + "/"); got != nil {
			t.Errorf("%q: got %q, want no filter", bad, got)
		}
	}
}

func TestChainID(t *testing.T) {
	if got := chainID([]string{"sha256:aaaa"}); got != "sha256:aaaa" {
		t.Errorf("one layer: %s", got)
	}
	// sha256("sha256:aaaa sha256:bbbb")
	if got, want := chainID([]string{"sha256:aaaa", "sha256:bbbb"}), "sha256:2c4d8760379f05d0ad1ed610712309f0114e7345e6e6a351494cff030ffdf197"; got != want {
		t.Errorf("two layers: %s, want %s", got, want)
	}
}

func TestMountOptions(t *testing.T) {
	flags, data := mountOptions([]string{"ro", "rbind", "index=off", "lowerdir=/a:/b"})
	if flags != unix.MS_RDONLY|unix.MS_BIND|unix.MS_REC || data != "index=off,lowerdir=/a:/b" {
		t.Errorf("flags %x, data %q", flags, data)
	}
}
