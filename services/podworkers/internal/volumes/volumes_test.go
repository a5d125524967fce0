package volumes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

func readVisible(t *testing.T, dir, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return string(data)
}

// The atomic writer: files appear through "..data", an unchanged payload
// writes nothing, an update swaps the whole version, and names the payload
// no longer has disappear while files not its own stay.
func TestWritePayload(t *testing.T) {
	dir := t.TempDir()
	changed, err := writePayload(dir, map[string]File{"a": {Data: []byte("1"), Mode: 0o644}, "sub/b": {Data: []byte("2"), Mode: 0o400}}, nil)
	if err != nil || !changed {
		t.Fatalf("first write: changed %v, %v", changed, err)
	}
	if got := readVisible(t, dir, "sub/b"); got != "2" {
		t.Fatalf("sub/b = %q", got)
	}
	if fi, err := os.Stat(filepath.Join(dir, "sub/b")); err != nil || fi.Mode().Perm() != 0o400 {
		t.Fatalf("sub/b mode: %v %v", fi, err)
	}
	if target, _ := os.Readlink(filepath.Join(dir, "a")); target != "..data/a" {
		t.Fatalf("a links to %q, want ..data/a", target)
	}
	first, _ := os.Readlink(filepath.Join(dir, dataLink))
	changed, err = writePayload(dir, map[string]File{"a": {Data: []byte("1"), Mode: 0o644}, "sub/b": {Data: []byte("2"), Mode: 0o400}}, nil)
	if err != nil || changed {
		t.Fatalf("same payload: changed %v, %v", changed, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "mine"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	changed, err = writePayload(dir, map[string]File{"a": {Data: []byte("new"), Mode: 0o644}}, nil)
	if err != nil || !changed {
		t.Fatalf("update: changed %v, %v", changed, err)
	}
	if got := readVisible(t, dir, "a"); got != "new" {
		t.Fatalf("a = %q after the update", got)
	}
	if _, err := os.Lstat(filepath.Join(dir, "sub")); !os.IsNotExist(err) {
		t.Errorf("sub survived an update without it: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, first)); !os.IsNotExist(err) {
		t.Errorf("the old version %s was kept", first)
	}
	if readVisible(t, dir, "mine") != "x" {
		t.Errorf("a file the writer did not write was touched")
	}
	for _, bad := range []string{"../x", "/abs", "..hidden", "a/../../x"} {
		if _, err := writePayload(dir, map[string]File{bad: {Data: nil, Mode: 0o644}}, nil); err == nil {
			t.Errorf("path %q accepted", bad)
		}
	}
}

type fakeSources struct {
	cms     map[string]*corev1.ConfigMap
	secrets map[string]*corev1.Secret
}

func (f fakeSources) ConfigMap(_ context.Context, _, name string) (*corev1.ConfigMap, error) {
	if cm, ok := f.cms[name]; ok {
		return cm, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmap"}, name)
}

func (f fakeSources) Secret(_ context.Context, _, name string) (*corev1.Secret, error) {
	if s, ok := f.secrets[name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secret"}, name)
}

type fakeTokens struct {
	n   int
	ttl time.Duration
}

func (f *fakeTokens) CreateToken(_ context.Context, _, account string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	f.n++
	out := req.DeepCopy()
	out.Status.Token = account + "-" + string(rune('0'+f.n))
	out.Status.ExpirationTimestamp = metav1.NewTime(time.Now().Add(f.ttl))
	return out, nil
}

func pod(vols ...corev1.Volume) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", Labels: map[string]string{"b": "2", "a": `q"`}},
		Spec: corev1.PodSpec{Volumes: vols, Containers: []corev1.Container{{Name: "c"}}}}
}

// The kinds' rules: optional sources, missing keys, item modes, the
// downward API's label format, hostPath type checks, unsupported kinds.
func TestSetupKinds(t *testing.T) {
	yes := true
	mode := int32(0o600)
	src := fakeSources{cms: map[string]*corev1.ConfigMap{"cm": {Data: map[string]string{"k": "v"}, BinaryData: map[string][]byte{"bin": {0, 1}}}}}
	m := New(t.TempDir(), src, &fakeTokens{ttl: time.Hour})
	t.Cleanup(func() { _ = m.Teardown("u1") })
	vol := func(name string, s corev1.VolumeSource) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: s}
	}
	got, err := m.Setup(t.Context(), pod(
		vol("all", corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}),
		vol("opt", corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "none"}, Optional: &yes}}),
		vol("items", corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"},
			Items: []corev1.KeyToPath{{Key: "k", Path: "x/y", Mode: &mode}}}}),
		vol("labels", corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "l", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}}),
		vol("scratch", corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}),
	))
	if err != nil {
		t.Fatal(err)
	}
	if readVisible(t, got["all"].Path, "k") != "v" || readVisible(t, got["all"].Path, "bin") != "\x00\x01" {
		t.Errorf("configMap: data and binaryData not both there")
	}
	if !got["all"].ReadOnly || got["scratch"].ReadOnly {
		t.Errorf("read-only: configMap %v, emptyDir %v", got["all"].ReadOnly, got["scratch"].ReadOnly)
	}
	if entries, _ := os.ReadDir(got["opt"].Path); len(entries) != 2 { // ..data and its version
		t.Errorf("an optional missing ConfigMap is not an empty volume: %v", entries)
	}
	if fi, err := os.Stat(filepath.Join(got["items"].Path, "x/y")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("item mode: %v %v", fi, err)
	}
	if l := readVisible(t, got["labels"].Path, "l"); l != "a=\"q\\\"\"\nb=\"2\"" {
		t.Errorf("labels file %q", l)
	}
	if fi, err := os.Stat(got["scratch"].Path); err != nil || fi.Mode().Perm() != 0o777 {
		t.Errorf("emptyDir mode: %v %v", fi, err)
	}

	for name, tc := range map[string]struct {
		src  corev1.VolumeSource
		want string
	}{
		"missing cm": {corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "none"}}},
			`MountVolume.SetUp failed for volume "v" : configmap "none" not found`},
		"missing key": {corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"},
			Items: []corev1.KeyToPath{{Key: "nope", Path: "p"}}}}, "configmap references non-existent config key: nope"},
		"missing secret": {corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}, `secret "s" not found`},
		"not a dir": {corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/proc/self/status", Type: ptr(corev1.HostPathDirectory)}},
			"hostPath type check failed: /proc/self/status is not a directory"},
		"pvc": {corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}, "volume kind not supported"},
	} {
		_, err := m.Setup(t.Context(), pod(vol("v", tc.src)))
		var se *SetupError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a SetupError with %q", name, err, tc.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// Tokens: one request while fresh, a new one past 80 % of the lifetime.
func TestTokenRefresh(t *testing.T) {
	tok := &fakeTokens{ttl: time.Hour}
	m := New(t.TempDir(), fakeSources{}, tok)
	p := pod(corev1.Volume{Name: "t", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}})
	t.Cleanup(func() { _ = m.Teardown(p.UID) })
	for range 3 {
		if _, err := m.Setup(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	if tok.n != 1 {
		t.Fatalf("%d token requests for three fresh syncs, want 1", tok.n)
	}
	m.mu.Lock()
	for k, v := range m.tok {
		v.issued, v.expires = v.issued.Add(-50*time.Minute), v.expires.Add(-50*time.Minute)
		m.tok[k] = v
	}
	m.mu.Unlock()
	vols, err := m.Setup(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	if tok.n != 2 || readVisible(t, vols["t"].Path, "token") != "default-2" {
		t.Fatalf("after 50 of 60 minutes: %d requests, token %q", tok.n, readVisible(t, vols["t"].Path, "token"))
	}
	if err := m.Teardown(p.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(vols["t"].Path); !os.IsNotExist(err) {
		t.Errorf("teardown left %s", vols["t"].Path)
	}
}

// Mounts: subPath inside the volume is created with the volume's mode; one
// that leaves the volume through a link is refused, as is an unknown
// volume; subPathExpr expands against the environment.
func TestMounts(t *testing.T) {
	root := t.TempDir()
	vol := filepath.Join(root, "v")
	if err := os.MkdirAll(vol, 0o777); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(vol, 0o777)
	if err := os.Symlink("/etc", filepath.Join(vol, "escape")); err != nil {
		t.Fatal(err)
	}
	vols := map[string]Volume{"v": {Path: vol}}
	c := &corev1.Container{Name: "c", VolumeMounts: []corev1.VolumeMount{
		{Name: "v", MountPath: "/a", SubPath: "new/dir"},
		{Name: "v", MountPath: "/b", SubPathExpr: "$(POD)", ReadOnly: true},
	}}
	ms, err := Mounts(pod(), c, vols, []string{"POD=p1"})
	if err != nil {
		t.Fatal(err)
	}
	if ms[0].HostPath != filepath.Join(vol, "new/dir") || ms[1].HostPath != filepath.Join(vol, "p1") || !ms[1].ReadOnly {
		t.Fatalf("mounts %+v", ms)
	}
	if fi, err := os.Stat(ms[0].HostPath); err != nil || fi.Mode().Perm() != fs.FileMode(0o777) {
		t.Errorf("subPath directory: %v %v, want the volume's mode 0777", fi, err)
	}
	for _, bad := range []corev1.VolumeMount{{Name: "v", MountPath: "/x", SubPath: "escape"}, {Name: "w", MountPath: "/x"}} {
		c := &corev1.Container{Name: "c", VolumeMounts: []corev1.VolumeMount{bad}}
		if _, err := Mounts(pod(), c, vols, nil); err == nil {
			t.Errorf("mount %+v accepted", bad)
		}
	}
}

// fsGroup: the volumes are the group's; Secret files readable by it, the
// emptyDir set-group-ID.
func TestFSGroup(t *testing.T) {
	gid := int64(1234)
	if os.Geteuid() != 0 {
		gid = int64(os.Getgid()) // only root may give files to any group
	}
	mode := int32(0o400)
	m := New(t.TempDir(), fakeSources{secrets: map[string]*corev1.Secret{"s": {Data: map[string][]byte{"k": []byte("v")}}}}, nil)
	p := pod(
		corev1.Volume{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s", DefaultMode: &mode}}},
		corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	)
	p.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: &gid}
	t.Cleanup(func() { _ = m.Teardown(p.UID) })
	vols, err := m.Setup(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(vols["sec"].Path, "k"), &st); err != nil {
		t.Fatal(err)
	}
	if fs.FileMode(st.Mode).Perm() != 0o440 || int64(st.Gid) != gid {
		t.Errorf("secret file: mode %o gid %d, want 0440 and the fsGroup %d", fs.FileMode(st.Mode).Perm(), st.Gid, gid)
	}
	fi, err := os.Stat(vols["scratch"].Path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&fs.ModeSetgid == 0 || fi.Mode().Perm() != 0o777 {
		t.Errorf("emptyDir mode %v, want set-group-ID and 0777", fi.Mode())
	}
	// a second sync with the same payload rewrites nothing.
	before, _ := os.Readlink(filepath.Join(vols["sec"].Path, dataLink))
	if _, err := m.Setup(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Readlink(filepath.Join(vols["sec"].Path, dataLink)); after != before {
		t.Errorf("an unchanged Secret was written again (%s, then %s)", before, after)
	}
}

// medium Memory is a tmpfs, with or without a size limit.
func TestEmptyDirMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("needs root: skipped under -short")
	}
	if os.Geteuid() != 0 {
		t.Fatalf("mounting a tmpfs needs root (uid %d)", os.Geteuid())
	}
	m := New(t.TempDir(), fakeSources{}, nil)
	limit := resource.MustParse("16Mi")
	p := pod(
		corev1.Volume{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		corev1.Volume{Name: "small", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &limit}}},
	)
	t.Cleanup(func() { _ = m.Teardown(p.UID) })
	vols, err := m.Setup(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"mem", "small"} {
		var st syscall.Statfs_t
		if err := syscall.Statfs(vols[name].Path, &st); err != nil || st.Type != 0x01021994 { // TMPFS_MAGIC
			t.Errorf("%s: filesystem type %x, %v: not a tmpfs", name, st.Type, err)
		}
		if name == "small" && st.Blocks*uint64(st.Bsize) != 16<<20 {
			t.Errorf("small: %d bytes, want the 16Mi size limit", st.Blocks*uint64(st.Bsize))
		}
	}
	// kubelet: the tmpfs keeps its sticky root, the fsGroup adds
	// set-group-ID, and a subPath made in it gets both
	// (EmptyDir volumes when FSGroup is specified, nonexistent volume
	// subPath: dgtrwxrwxrwx).
	gid := int64(123)
	p.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: &gid}
	if vols, err = m.Setup(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	sub, err := subPath(vols["mem"].Path, "test-sub")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{vols["mem"].Path, sub} {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().String(); got != "dgtrwxrwxrwx" {
			t.Errorf("%s: mode %s, want dgtrwxrwxrwx", dir, got)
		}
	}
	if err := m.Teardown(p.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(vols["mem"].Path); !os.IsNotExist(err) {
		t.Errorf("teardown left %s: %v", vols["mem"].Path, err)
	}
}

// fakeUsers gives pod u1 uid 70001 and any other 70002.
type fakeUsers struct{}

func (fakeUsers) PodUser(p *corev1.Pod) (uint32, uint32, bool, error) {
	if p.UID == "u1" {
		return 70001, 70001, true, nil
	}
	return 70002, 70002, true, nil
}

func (fakeUsers) ReleasePodUser(types.UID) error { return nil }

// With pod users, a pod's volumes are its user's alone: the directories
// down to each volume and those of payload volumes are root's in the
// pod's group (0750, so the pod reads and changes nothing), the files the
// pod's user's, Secret and projected ones 0600 whatever defaultMode
// gives others; a subPath the pod points through a link it planted in
// its emptyDir makes nothing outside.
func TestPodUsersOwnTheirVolumes(t *testing.T) {
	if testing.Short() {
		t.Skip("needs root: skipped under -short")
	}
	if os.Geteuid() != 0 {
		t.Fatalf("giving files to a pod's user needs root (uid %d)", os.Geteuid())
	}
	root := t.TempDir()
	src := fakeSources{cms: map[string]*corev1.ConfigMap{"cm": {Data: map[string]string{"k": "v"}}},
		secrets: map[string]*corev1.Secret{"s": {Data: map[string][]byte{"password": []byte("s3cret")}}}}
	m := New(root, src, &fakeTokens{ttl: time.Hour}, WithPodUsers(fakeUsers{}))
	p := pod(
		corev1.Volume{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}},
		corev1.Volume{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}},
		corev1.Volume{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}},
		corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	)
	t.Cleanup(func() { _ = m.Teardown(p.UID) })
	vols, err := m.Setup(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	check := func(path string, uid, gid uint32, mode fs.FileMode) {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != uid || st.Gid != gid || fs.FileMode(st.Mode).Perm() != mode {
			t.Errorf("%s: %d:%d %o, want %d:%d %o", path, st.Uid, st.Gid, fs.FileMode(st.Mode).Perm(), uid, gid, mode)
		}
	}
	podDir := m.PodDir(p.UID)
	for _, d := range []string{podDir, filepath.Join(podDir, "volumes"), filepath.Join(podDir, "volumes", dirSecret),
		vols["sec"].Path, filepath.Join(vols["sec"].Path, dataLink), vols["proj"].Path, vols["cm"].Path} {
		check(d, 0, 70001, 0o750)
	}
	check(filepath.Join(root, "pods"), 0, 0, 0o711)
	check(filepath.Join(vols["sec"].Path, "password"), 70001, 70001, 0o600)
	check(filepath.Join(vols["proj"].Path, "token"), 70001, 70001, 0o600)
	check(filepath.Join(vols["cm"].Path, "k"), 70001, 70001, 0o644)
	check(vols["scratch"].Path, 0, 0, 0o777)

	// a second sync rewrites nothing.
	before, _ := os.Readlink(filepath.Join(vols["sec"].Path, dataLink))
	if _, err := m.Setup(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Readlink(filepath.Join(vols["sec"].Path, dataLink)); after != before {
		t.Errorf("an unchanged Secret was written again (%s, then %s)", before, after)
	}

	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(vols["scratch"].Path, "planted")); err != nil {
		t.Fatal(err)
	}
	c := &corev1.Container{Name: "c", VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/x", SubPath: "planted/made"}}}
	if _, err := Mounts(p, c, vols, nil); err == nil {
		t.Error("a subPath through a planted link was accepted")
	}
	if _, err := os.Stat(filepath.Join(outside, "made")); !os.IsNotExist(err) {
		t.Errorf("a subPath was made outside the volume: %v", err)
	}
}

// An image volume is a directory the runtime mounts the image on: Mounts
// hands the runtime the image and the subPath unresolved, read-only;
// a subPath that leaves the volume is refused here already.
func TestImageVolumeMounts(t *testing.T) {
	m := New(t.TempDir(), fakeSources{}, nil)
	p := pod()
	p.Spec.Volumes = []corev1.Volume{{Name: "img", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "kitten:1.8", PullPolicy: corev1.PullAlways}}}}
	vols, err := m.Setup(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	v := vols["img"]
	if fi, err := os.Stat(v.Path); err != nil || !fi.IsDir() || filepath.Base(filepath.Dir(v.Path)) != "kubernetes.io~image" || !v.ReadOnly {
		t.Fatalf("volume %+v: %v", v, err)
	}
	c := &corev1.Container{Name: "c", VolumeMounts: []corev1.VolumeMount{{Name: "img", MountPath: "/a"}, {Name: "img", MountPath: "/b", SubPath: "etc"}}}
	ms, err := Mounts(p, c, vols, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, sub := range []string{"", "etc"} {
		if ms[i].HostPath != v.Path || !ms[i].ReadOnly || ms[i].Image == nil || ms[i].Image.Reference != "kitten:1.8" ||
			ms[i].Image.PullPolicy != corev1.PullAlways || ms[i].Image.SubPath != sub {
			t.Errorf("mount %d: %+v %+v", i, ms[i], ms[i].Image)
		}
	}
	if _, err := os.Stat(filepath.Join(v.Path, "etc")); !os.IsNotExist(err) {
		t.Errorf("the subPath was made in the volume's directory: %v", err)
	}
	c = &corev1.Container{Name: "c", VolumeMounts: []corev1.VolumeMount{{Name: "img", MountPath: "/x", SubPath: "../x"}}}
	if _, err := Mounts(p, c, vols, nil); err == nil {
		t.Error("a subPath with .. accepted")
	}
}

// releaseCounter counts the image volume releases asked of the runtime.
type releaseCounter struct{ n map[types.UID]int }

func (r *releaseCounter) ReleaseImageVolumes(_ context.Context, uid types.UID) error {
	r.n[uid]++
	return nil
}

// Teardown releases the pod's image volumes before it removes the pod's
// directory; once the runtime's RemovePod has released them,
// TeardownAfterRemove only removes the directory.
func TestTeardownReleasesImageVolumesOnce(t *testing.T) {
	rc := &releaseCounter{n: map[types.UID]int{}}
	m := New(t.TempDir(), fakeSources{}, &fakeTokens{ttl: time.Hour}, WithImageVolumes(rc))
	for _, tc := range []struct {
		teardown func(types.UID) error
		releases int
	}{{m.Teardown, 1}, {m.TeardownAfterRemove, 0}} {
		p := pod(corev1.Volume{Name: "e", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		p.UID = types.UID(fmt.Sprintf("u-%d", tc.releases))
		vols, err := m.Setup(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		if err := tc.teardown(p.UID); err != nil {
			t.Fatal(err)
		}
		if rc.n[p.UID] != tc.releases {
			t.Errorf("pod %s: %d image volume releases, want %d", p.UID, rc.n[p.UID], tc.releases)
		}
		if _, err := os.Stat(vols["e"].Path); !os.IsNotExist(err) {
			t.Errorf("pod %s: teardown left %s", p.UID, vols["e"].Path)
		}
	}
}

// TeardownPod asks the runtime to release image volumes only for a pod
// whose spec has one; either way the pod's directory goes.
func TestTeardownPodReleasesOnlyAPodsImageVolumes(t *testing.T) {
	rc := &releaseCounter{n: map[types.UID]int{}}
	m := New(t.TempDir(), fakeSources{}, &fakeTokens{ttl: time.Hour}, WithImageVolumes(rc))
	image := corev1.Volume{Name: "img", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "example.test/img:1"}}}
	for _, tc := range []struct {
		uid      types.UID
		extra    []corev1.Volume
		releases int
	}{{"no-image", nil, 0}, {"image", []corev1.Volume{image}, 1}} {
		p := pod(append([]corev1.Volume{{Name: "e", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}, tc.extra...)...)
		p.UID = tc.uid
		// the emptyDir alone is set up: the image volume is the runtime's.
		set := p.DeepCopy()
		set.Spec.Volumes = set.Spec.Volumes[:1]
		vols, err := m.Setup(t.Context(), set)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.TeardownPod(p); err != nil {
			t.Fatal(err)
		}
		if rc.n[p.UID] != tc.releases {
			t.Errorf("pod %s: %d image volume releases, want %d", p.UID, rc.n[p.UID], tc.releases)
		}
		if _, err := os.Stat(vols["e"].Path); !os.IsNotExist(err) {
			t.Errorf("pod %s: teardown left %s", p.UID, vols["e"].Path)
		}
	}
}
