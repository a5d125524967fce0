package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
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

// A containerd started with runtime handlers runs a pod sandbox under each
// (runc by another name) and refuses a handler it was not given; a
// containerd not started here that lacks a handler asked for is refused.
func TestContainerdRuntimeHandlers(t *testing.T) {
	SkipShort(t, "root to start a containerd")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cd, err := EnsureContainerd(ctx, ContainerdOptions{Address: dir + "/containerd.sock", Dir: dir, RuntimeHandlers: []string{"test-handler"}})
	if err != nil {
		t.Fatalf("containerd: %v", err)
	}
	defer cd.Stop()
	if !cd.Started {
		t.Fatalf("containerd at %s was not started by the test", cd.Address)
	}
	rs, err := remote.NewRemoteRuntimeService(ctx, cd.Endpoint, 30*time.Second, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close(t.Context())
	sandbox := func(handler string) error {
		cfg := &runtimeapi.PodSandboxConfig{
			Metadata:     &runtimeapi.PodSandboxMetadata{Name: "h-" + handler, Namespace: "default", Uid: "uid-" + handler},
			Linux:        &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}}},
			LogDirectory: t.TempDir(),
		}
		id, err := rs.RunPodSandbox(ctx, cfg, handler)
		if err != nil {
			return err
		}
		st, err := rs.PodSandboxStatus(ctx, id, false)
		if err != nil {
			return err
		}
		if got := st.GetStatus().GetRuntimeHandler(); got != handler {
			t.Errorf("sandbox of handler %q reports handler %q", handler, got)
		}
		return nil
	}
	if err := sandbox("test-handler"); err != nil {
		t.Errorf("sandbox with handler test-handler: %v", err)
	}
	if err := sandbox("no-such-handler"); err == nil {
		t.Error("a sandbox with an unknown handler ran")
	}
	// The same containerd, found answering: it has test-handler, not
	// another one.
	if other, err := EnsureContainerd(ctx, ContainerdOptions{Address: cd.Address, NoStart: true, NoImages: true, RuntimeHandlers: []string{"test-handler"}}); err != nil {
		t.Errorf("a running containerd with test-handler refused: %v", err)
	} else {
		other.Stop()
	}
	if _, err := EnsureContainerd(ctx, ContainerdOptions{Address: cd.Address, NoStart: true, NoImages: true, RuntimeHandlers: []string{"other-handler"}}); err == nil {
		t.Error("a running containerd without other-handler was accepted for it")
	}
}

// A started containerd's CRI plugin reads registry host configuration
// (hosts.toml) from the directory asked for, and from none otherwise.
func TestContainerdConfigRegistry(t *testing.T) {
	with := containerdConfig("/d", "/d/c.sock", PauseImage, "/cni/bin", "/cni/conf", nil, "/d/certs.d")
	if !strings.Contains(with, "    [plugins.\"io.containerd.grpc.v1.cri\".registry]\n      config_path = \"/d/certs.d\"\n") {
		t.Errorf("no config_path in\n%s", with)
	}
	if without := containerdConfig("/d", "/d/c.sock", PauseImage, "/cni/bin", "/cni/conf", nil, ""); strings.Contains(without, "config_path") {
		t.Errorf("a config_path without a directory:\n%s", without)
	}
}

// RemoveSandboxes with a selector removes the sandboxes carrying its
// labels, with their pods' log directories, and leaves every other one
// (another test's, on a containerd they share) running.
func TestRemoveSandboxesKeepsOthers(t *testing.T) {
	SkipShort(t, "containerd (root to start one)")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cd, err := EnsureContainerd(ctx, ContainerdOptions{})
	if err != nil {
		t.Fatalf("containerd: %v", err)
	}
	defer cd.Stop()
	rs, err := remote.NewRemoteRuntimeService(ctx, cd.Endpoint, 30*time.Second, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close(context.Background())
	logRoot := t.TempDir()
	const label = "io.splitlet.test-owner"
	run := func(owner string) string {
		uid := owner + "-" + strings.ReplaceAll(t.Name(), "/", "-")
		cfg := &runtimeapi.PodSandboxConfig{
			Metadata:     &runtimeapi.PodSandboxMetadata{Name: owner, Namespace: "default", Uid: uid},
			Labels:       map[string]string{label: owner},
			Linux:        &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}}},
			LogDirectory: filepath.Join(logRoot, "default_"+owner+"_"+uid),
		}
		if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
			t.Fatal(err)
		}
		id, err := rs.RunPodSandbox(ctx, cfg, "")
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	mine, theirs := run("mine"), run("theirs")
	defer func() {
		_ = rs.StopPodSandbox(context.Background(), theirs)
		_ = rs.RemovePodSandbox(context.Background(), theirs)
	}()
	if err := RemoveSandboxes(ctx, cd.Endpoint, logRoot, map[string]string{label: "mine"}); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.PodSandboxStatus(ctx, mine, false); err == nil {
		t.Errorf("the selected sandbox %s is still there", mine)
	}
	st, err := rs.PodSandboxStatus(ctx, theirs, false)
	if err != nil || st.GetStatus().GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("the other sandbox %s: %v, %v", theirs, st.GetStatus().GetState(), err)
	}
	logs, err := os.ReadDir(logRoot)
	if err != nil {
		t.Fatal(err)
	}
	if len(logs) != 1 || !strings.HasPrefix(logs[0].Name(), "default_theirs_") {
		t.Errorf("log directories left: %v, want the other sandbox's alone", logs)
	}
}
