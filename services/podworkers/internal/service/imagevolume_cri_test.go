package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/moby/sys/mountinfo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/runtime/cri"
	"github.com/splitlet/splitlet/libs/testenv"
)

// Image volumes on containerd (whose CRI here ignores Mount.image): the
// pod workers pull the volume's image (pullPolicy Always, from a registry
// that wants the pod's imagePullSecrets) and mount it
// read-only; the container reads the image's files, at its root and
// through a subPath (a link in the image resolved inside the image), and
// cannot write there. A pod whose mounted image volume cannot be pulled
// waits with ErrImagePull then ImagePullBackOff and the kubelet's Events;
// one whose missing image no container mounts runs; a subPath missing in
// the image fails with CreateContainerError. When the pod is gone, no
// mount and no snapshot view of it are left.
func TestCRIImageVolume(t *testing.T) {
	e, cd := criEnv(t, "pw-imagevol")
	admin := controlPlane(t).Clientset()
	reg, err := testenv.StartRegistry(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	image, err := reg.Push(t.Context(), "e2e/kitten", "1.8", testenv.ImageConfig{}, []testenv.ImageFile{
		{Path: "etc", Mode: fs.ModeDir | 0o755},
		{Path: "data.json", Mode: 0o644, Data: []byte(`{"image": "kitten.jpg"}` + "\n")},
		{Path: "etc/os-release", Mode: 0o644, Data: []byte("NAME=\"Alpine Linux\"\n")},
		{Path: "conf", Mode: fs.ModeSymlink, Link: "/../../etc"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeImage(t, cd.Endpoint, image) })
	// the registry wants credentials: the pods' imagePullSecrets give them.
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "imagevol-regcred"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: reg.DockerConfigJSON()}}
	if _, err := admin.CoreV1().Secrets("default").Create(t.Context(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Secrets("default").Delete(context.Background(), secret.Name, metav1.DeleteOptions{})
	})
	pullSecrets := []corev1.LocalObjectReference{{Name: secret.Name}}
	rootDir := testenv.DataDir(t)
	testenv.OpenWay(t, rootDir)
	e.startReplica(t, config.RuntimeCRI, func(c *Config) { c.RootDir = rootDir })

	p := newPod(t, admin, "imagevol", func(p *corev1.Pod) {
		e.podDefaults(p)
		p.Spec.NodeName = e.node
		p.Spec.ImagePullSecrets = pullSecrets
		p.Spec.Volumes = []corev1.Volume{
			{Name: "out", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "kitten", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: image, PullPolicy: corev1.PullAlways}}},
		}
		p.Spec.Containers[0].Command = []string{"sh", "-c", `cat /volume/data.json > /out/data
cat /conf/os-release > /out/sub
if touch /volume/x 2>/dev/null; then echo writable; else echo read-only; fi > /out/ro
while true; do sleep 1; done`}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "out", MountPath: "/out"},
			{Name: "kitten", MountPath: "/volume"}, {Name: "kitten", MountPath: "/conf", SubPath: "conf"}}
	})
	withVolume := func(name, ref, subPath string, mounted bool) *corev1.Pod {
		return newPod(t, admin, name, func(p *corev1.Pod) {
			e.podDefaults(p)
			p.Spec.NodeName = e.node
			p.Spec.ImagePullSecrets = pullSecrets
			p.Spec.Volumes = []corev1.Volume{{Name: "volume", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: ref}}}}
			if mounted {
				p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "volume", MountPath: "/volume", SubPath: subPath}}
			}
		})
	}
	missing := reg.Image("e2e/invalid", "v1")
	bad := withVolume("imagevol-missing", missing, "", true)
	unused := withVolume("imagevol-unused", missing, "", false)
	noSub := withVolume("imagevol-nosubpath", image, "not-existing", true)
	e.track(p, bad, unused, noSub)
	e.send(bus.OpAdd, p, bad, unused, noSub)

	out := filepath.Join(rootDir, "pods", string(p.UID), "volumes", "kubernetes.io~empty-dir", "out")
	read := func(name string) string { data, _ := os.ReadFile(filepath.Join(out, name)); return string(data) }
	eventually(t, 2*time.Minute, "the container read the image volume", func() bool { return read("ro") != "" })
	if got := read("data"); !strings.Contains(got, "kitten.jpg") {
		t.Errorf("/volume/data.json: %q", got)
	}
	if got := read("sub"); !strings.Contains(got, "Alpine Linux") {
		t.Errorf("/conf/os-release through the subPath: %q", got)
	}
	if got := read("ro"); got != "read-only\n" {
		t.Errorf("the image volume is %q, want read-only", got)
	}
	wantPullEvents(t, admin, p, image)
	target := filepath.Join(rootDir, "pods", string(p.UID), "volumes", "kubernetes.io~image", "kitten")
	wantMount(t, target, true)
	if views := imageViews(t, cd.Endpoint, string(p.UID)); len(views) != 1 {
		t.Errorf("snapshot views of the pod: %v, want one", views)
	}

	eventually(t, time.Minute, "the missing image volume's pod waiting with ErrImagePull", func() bool { return e.sawWaiting(bad.UID, cri.ReasonErrImagePull) })
	eventually(t, time.Minute, "the missing image volume's pod waiting with ImagePullBackOff", func() bool { return e.sawWaiting(bad.UID, cri.ReasonImagePullBackOff) })
	wantEvent(t, admin, bad, "Warning", "Failed", regexp.QuoteMeta(fmt.Sprintf("Failed to pull image %q: ", missing)))
	wantEvent(t, admin, bad, "Warning", "Failed", "^Error: ErrImagePull$")
	wantEvent(t, admin, bad, "Normal", "BackOff", "^"+regexp.QuoteMeta(fmt.Sprintf("Back-off pulling image %q", missing))+"$")
	eventually(t, time.Minute, "the pod whose missing image volume is unused running", func() bool { st, _ := e.get(unused.UID); return containerRunning(st) })
	eventually(t, time.Minute, "the missing subPath failing with CreateContainerError", func() bool { return e.sawWaiting(noSub.UID, cri.ReasonCreateError) })

	e.send(bus.OpDelete, markDeleted(p))
	eventually(t, time.Minute, "pod terminated", func() bool { st, _ := e.get(p.UID); return st != nil && st.Terminated })
	wantMount(t, target, false)
	if views := imageViews(t, cd.Endpoint, string(p.UID)); len(views) != 0 {
		t.Errorf("snapshot views left after the pod: %v", views)
	}
}

// wantMount fails unless target is (or is not) a read-only, nosuid, nodev
// mount point.
func wantMount(t *testing.T, target string, want bool) {
	t.Helper()
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(target))
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case !want && len(ms) > 0:
		t.Errorf("%s is still mounted: %+v", target, ms[0])
	case want && len(ms) == 0:
		t.Errorf("%s is not mounted", target)
	case want:
		opts := "," + ms[0].Options + ","
		for _, o := range []string{",ro,", ",nosuid,", ",nodev,"} {
			if !strings.Contains(opts, o) {
				t.Errorf("%s is mounted %s, want ro,nosuid,nodev", target, ms[0].Options)
			}
		}
	}
}

// imageViews lists containerd's snapshots of the pod's image volumes.
func imageViews(t *testing.T, endpoint, uid string) []string {
	t.Helper()
	path := strings.TrimPrefix(endpoint, "unix://")
	conn, err := grpc.NewClient("passthrough:///containerd", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(t.Context(), "containerd-namespace", "k8s.io")
	stream, err := snapshotsapi.NewSnapshotsClient(conn).List(ctx, &snapshotsapi.ListSnapshotsRequest{Snapshotter: "overlayfs"})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range resp.GetInfo() {
			if strings.Contains(in.GetName(), uid) {
				out = append(out, in.GetName())
			}
		}
	}
}

// The sim and process runtimes mount no image volume: a pod with one is
// rejected at admission (PodFeatureUnsupported, an Event), never run
// without its volume.
func TestImageVolumeRefusedWithoutCRI(t *testing.T) {
	for _, rt := range []string{config.RuntimeSim, config.RuntimeProcess} {
		t.Run(rt, func(t *testing.T) {
			e := newEnv(t, "pw-imagevol-"+rt)
			e.startReplica(t, rt, nil)
			p := newPod(t, e.cs, "imagevol-"+rt, func(p *corev1.Pod) {
				p.Spec.NodeName = e.node
				p.Spec.Volumes = []corev1.Volume{{Name: "volume", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "busybox"}}}}
				p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "volume", MountPath: "/volume"}}
			})
			e.send(bus.OpAdd, p)
			eventually(t, 30*time.Second, "the pod rejected", func() bool {
				st, _ := e.get(p.UID)
				return st != nil && st.Phase == corev1.PodFailed && st.Terminated
			})
			st, _ := e.get(p.UID)
			want := fmt.Sprintf(`Pod was rejected: volume "volume": image volumes are not supported by the %s runtime (they need the cri runtime)`, rt)
			if st.Reason != "PodFeatureUnsupported" || st.Message != want {
				t.Errorf("rejection %q: %q, want PodFeatureUnsupported: %q", st.Reason, st.Message, want)
			}
			wantEvent(t, e.cs, p, "Warning", "PodFeatureUnsupported", "image volumes are not supported")
		})
	}
}
