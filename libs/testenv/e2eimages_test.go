package testenv

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

// The names `e2e.test --list-images` printed for v1.36.3 (a part).
var listedImages = []string{
	"registry.k8s.io/e2e-test-images/agnhost:2.55",
	"registry.k8s.io/e2e-test-images/agnhost:2.63.0",
	"gcr.io/k8s-authenticated-test/agnhost:2.6",
	"registry.k8s.io/e2e-test-images/busybox:1.37.0-1",
	"registry.k8s.io/e2e-test-images/glibc-dns-testing:2.0.0",
	"registry.k8s.io/e2e-test-images/kitten:1.8",
	"registry.k8s.io/e2e-test-images/nginx:1.15-4",
	"registry.k8s.io/e2e-test-images/nonewprivs:1.4",
	"registry.k8s.io/e2e-test-images/nonroot:1.5",
	"registry.k8s.io/pause:3.10.2",
	"invalid.registry.k8s.io/invalid/alpine:3.1",
	"",
}

func TestPlanE2EImages(t *testing.T) {
	kinds, leftOut := PlanE2EImages(listedImages, E2EBinaries{Agnhost: "/x/agnhost"})
	want := map[string][]string{
		"agnhost":           {"registry.k8s.io/e2e-test-images/agnhost:2.55", "registry.k8s.io/e2e-test-images/agnhost:2.63.0"},
		"busybox":           {"registry.k8s.io/e2e-test-images/busybox:1.37.0-1"},
		"glibc-dns-testing": {"registry.k8s.io/e2e-test-images/glibc-dns-testing:2.0.0"},
		"kitten":            {"registry.k8s.io/e2e-test-images/kitten:1.8"},
		"nginx":             {"registry.k8s.io/e2e-test-images/nginx:1.15-4"},
		"nonroot":           {"registry.k8s.io/e2e-test-images/nonroot:1.5"},
		"pause":             {"registry.k8s.io/pause:3.10.2"},
	}
	if !reflect.DeepEqual(kinds, want) {
		t.Errorf("kinds = %v, want %v", kinds, want)
	}
	for _, name := range []string{
		"gcr.io/k8s-authenticated-test/agnhost:2.6", // another registry: not agnhost's repository
		"invalid.registry.k8s.io/invalid/alpine:3.1",
	} {
		if leftOut[name] == "" {
			t.Errorf("%s not left out: %v", name, leftOut)
		}
	}
	if why := leftOut["registry.k8s.io/e2e-test-images/nonewprivs:1.4"]; !strings.Contains(why, "nnp") {
		t.Errorf("nonewprivs without its binary: left out for %q", why)
	}
}

// The archives hold what the tests rely on: busybox's applets, /agnhost as
// the entrypoint, uid 1234 for nonroot, a setuid nnp.
func TestBuildE2EImages(t *testing.T) {
	dir := t.TempDir()
	bin := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bins := E2EBinaries{
		// A stand-in for busybox: what matters is --list.
		Busybox:      bin("busybox", "#!/bin/sh\necho sh; echo sleep; echo id; echo nc\n"),
		Shell:        bin("bash-static", "bash-binary"),
		ShellChooser: bin("e2esh", "e2esh-binary"),
		Netcat:       bin("e2enc", "e2enc-binary"),
		Agnhost:      bin("agnhost", "agnhost-binary"),
		Nonewprivs:   bin("nnp", "nnp-binary"),
		Pause:        bin("pause", "pause-binary"),
		AgnhostTLS:   dir,
	}
	bin("localhost.crt", "crt")
	bin("localhost.key", "key")
	archives, built, leftOut, err := BuildE2EImages(filepath.Join(dir, "out"), listedImages, bins)
	if err != nil {
		t.Fatal(err)
	}
	if len(archives) != 8 || len(built) != 9 || len(leftOut) != 2 {
		t.Fatalf("archives %v, built %v, left out %v", archives, built, leftOut)
	}
	read := func(kind string) (cfg map[string]any, tags []string, files map[string]*tar.Header) {
		data, err := os.ReadFile(filepath.Join(dir, "out", "e2e-"+kind+".tar"))
		if err != nil {
			t.Fatal(err)
		}
		entries := map[string][]byte{}
		tr := tar.NewReader(bytes.NewReader(data))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			entries[h.Name], _ = io.ReadAll(tr)
		}
		var manifest []struct {
			Config   string
			RepoTags []string
			Layers   []string
		}
		if err := json.Unmarshal(entries["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
			t.Fatalf("%s: manifest: %v %s", kind, err, entries["manifest.json"])
		}
		var config struct {
			Config map[string]any `json:"config"`
		}
		if err := json.Unmarshal(entries[manifest[0].Config], &config); err != nil {
			t.Fatal(err)
		}
		files = map[string]*tar.Header{}
		lr := tar.NewReader(bytes.NewReader(entries[manifest[0].Layers[0]]))
		for {
			h, err := lr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = h
		}
		return config.Config, manifest[0].RepoTags, files
	}

	cfg, tags, files := read("agnhost")
	// agnhost's sh is e2esh too (it runs a script naming nc in bash).
	if len(tags) != 2 || files["agnhost"] == nil || files["bin/sh"] == nil || files["bin/sh"].Size != int64(len("e2esh-binary")) ||
		files["usr/libexec/e2esh/bash"] == nil ||
		files["agnhost-2"] == nil || files["agnhost-2"].Linkname != "agnhost" || files["localhost.crt"] == nil {
		t.Errorf("agnhost: tags %v, files %v", tags, keys(files))
	}
	// agnhost's nc is the one given (UDP), not busybox's link.
	if nc := files["bin/nc"]; nc == nil || nc.Typeflag != tar.TypeReg || nc.Size != int64(len("e2enc-binary")) {
		t.Errorf("agnhost: bin/nc %+v, want the e2enc given", nc)
	}
	if ep, _ := json.Marshal(cfg["Entrypoint"]); string(ep) != `["/agnhost"]` {
		t.Errorf("agnhost entrypoint %s", ep)
	}
	if cfg, _, _ := read("nonroot"); cfg["User"] != "1234" {
		t.Errorf("nonroot runs as %v, want 1234", cfg["User"])
	}
	if _, _, files := read("nonewprivs"); files["usr/local/bin/nnp"] == nil || files["usr/local/bin/nnp"].Mode&0o4000 == 0 {
		t.Errorf("nnp is not setuid: %v", files["usr/local/bin/nnp"])
	}
	// The nginx stand-in: nginx -g "daemon off;" runs /usr/sbin/nginx,
	// which keeps its PID where nginx does and serves on port 80.
	if cfg, _, files := read("nginx"); files["usr/sbin/nginx"] == nil || files["usr/sbin/nginx"].Mode&0o111 == 0 || files["bin/sh"] == nil {
		t.Errorf("nginx: files %v", keys(files))
	} else if cmd, _ := json.Marshal(cfg["Cmd"]); string(cmd) != `["nginx","-g","daemon off;"]` {
		t.Errorf("nginx command %s", cmd)
	}
	if _, _, files := read("glibc-dns-testing"); files["bin/sh"] == nil || files["etc/nsswitch.conf"] == nil {
		t.Errorf("glibc-dns-testing: files %v", keys(files))
	}
	// The image volume specs read /data.json and /etc/os-release.
	if _, _, files := read("kitten"); files["data.json"] == nil || files["etc/os-release"] == nil {
		t.Errorf("kitten: files %v", keys(files))
	}
	// agnhost's fake-registry-server serves pause:testing from /var/registry.
	if _, _, files := read("agnhost"); files["var/registry/pause/manifests/testing"] == nil {
		t.Errorf("agnhost: no pause:testing for its fake registry: %v", keys(files))
	}
	if _, tags, files := read("pause"); !reflect.DeepEqual(tags, []string{"registry.k8s.io/pause:3.10.2"}) || files["pause"] == nil || files["bin/sh"] != nil {
		t.Errorf("pause: tags %v, files %v", tags, keys(files))
	}
	// The busybox image's sh is the shell chooser given, with the bash it
	// runs for variables named data-1 beside it; the other images keep
	// busybox's sh.
	if _, _, files := read("busybox"); files["bin/busybox"] == nil || files["bin/busybox"].Mode&int64(fs.ModePerm) != 0o755 ||
		files["bin/sh"] == nil || files["bin/sh"].Typeflag != tar.TypeReg || files["bin/sh"].Size != int64(len("e2esh-binary")) ||
		files["usr/libexec/e2esh/bash"] == nil || files["usr/libexec/e2esh/bash"].Size != int64(len("bash-binary")) || files["bin/sleep"].Linkname != "busybox" {
		t.Errorf("busybox: files %v, sh %+v", keys(files), files["bin/sh"])
	}
}

func keys(m map[string]*tar.Header) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// The agnhost image's curl takes the options the tests give curl: those
// without effect dropped, --max-time as a timeout around wget; others
// refused.
func TestCurlScript(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "curl"), []byte(curlScript), 0o755); err != nil {
		t.Fatal(err)
	}
	// a wget that prints the arguments it was given, a timeout that says
	// its limit and runs the rest
	if err := os.WriteFile(filepath.Join(dir, "wget"), []byte("#!/bin/sh\necho \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "timeout"), []byte("#!/bin/sh\nprintf 'timeout %s ' \"$1\"\nshift\nexec \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(dir, "curl"), args...)
		cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin"}
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"http://10.0.0.1:8080/echo?msg=poststart"}, "-q -O - http://10.0.0.1:8080/echo?msg=poststart"},
		{[]string{"-g", "-q", "-s", "--max-time", "15", "--connect-timeout", "1", "http://10.0.0.1:8083/hostName"}, "timeout 15 -q -O - http://10.0.0.1:8083/hostName"},
		{[]string{"-g", "-q", "-s", "http://10.0.0.2:9080/dial?request=hostname&protocol=udp&host=10.0.0.1&port=8081&tries=1"}, "-q -O - http://10.0.0.2:9080/dial?request=hostname&protocol=udp&host=10.0.0.1&port=8081&tries=1"},
	} {
		got, err := run(c.args...)
		if err != nil || got != c.want {
			t.Errorf("curl %v: wget %q (%v), want %q", c.args, got, err, c.want)
		}
	}
	if out, err := run("-X", "POST", "http://x/"); err == nil || !strings.Contains(out, "not supported") {
		t.Errorf("curl -X: %q, %v", out, err)
	}
}

// The busybox test image's sh hands variables whose names are not shell
// names (data-1, 1-data-1) on to env, as the ConfigMap and Secret env specs
// expect of `sh -c env`, and otherwise is busybox's sh, whose messages the
// read-only root file system spec expects. The image's files run here,
// chrooted.
func TestBusyboxE2EImageShell(t *testing.T) {
	SkipShort(t, "root, Debian's busybox-static and bash-static")
	images, err := E2EImages(map[string][]string{"busybox": {"registry.k8s.io/e2e-test-images/busybox:1.37.0-1"}}, E2EBinaries{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	writeImageFiles(t, root, images[0].Files)
	run := func(script string, env ...string) string {
		cmd := exec.CommandContext(t.Context(), "/bin/sh", "-c", script)
		cmd.Env = append([]string{"PATH=/bin"}, env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	out := run("env", "data-1=value-1", "1-data-1=value-1", "p_data=value-2")
	for _, want := range []string{"data-1=value-1", "1-data-1=value-1", "p_data=value-2"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("sh -c env printed no %s:\n%s", want, out)
		}
	}
	if err := os.Chmod(root, 0o555); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(root, 0o755)
	// as the spec's container, not root: root writes a read-only directory.
	cmd := exec.CommandContext(t.Context(), "/bin/sh", "-c", "echo test > /file")
	cmd.Env = []string{"PATH=/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	msg, _ := cmd.CombinedOutput()
	if want := "/bin/sh: can't create /file: Permission denied\n"; string(msg) != want {
		t.Errorf("sh -c 'echo test > /file' in a directory it may not write: %q, want busybox's %q", msg, want)
	}
}

// The glibc-dns-testing stand-in answers `hostname -f` as glibc does: the
// first name of the /etc/hosts line that holds the host name (the FQDN the
// node agent writes for a pod with a subdomain), and the name itself on a
// line without one. Its files run here, chrooted, in a UTS namespace of
// their own.
func TestGlibcDNSE2EImageHostnameFQDN(t *testing.T) {
	SkipShort(t, "root and Debian's busybox-static")
	images, err := E2EImages(map[string][]string{"glibc-dns-testing": {"registry.k8s.io/e2e-test-images/glibc-dns-testing:2.0.0"}}, E2EBinaries{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	writeImageFiles(t, root, images[0].Files)
	for _, c := range []struct{ hosts, want string }{
		{"127.0.0.1\tlocalhost\n10.9.0.5\tpod-a.t.ns.svc.cluster.local\tpod-a\n", "pod-a;pod-a.t.ns.svc.cluster.local;"},
		{"127.0.0.1\tlocalhost\n10.9.0.5\tpod-a\n", "pod-a;pod-a;"},
	} {
		if err := os.WriteFile(filepath.Join(root, "etc/hosts"), []byte(c.hosts), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(t.Context(), "/bin/sh", "-c", "hostname pod-a && echo $(hostname)';'$(hostname -f)';'")
		cmd.Env = []string{"PATH=/bin"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Cloneflags: syscall.CLONE_NEWUTS}
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != c.want {
			t.Errorf("hosts %q: %q (%v), want %q", c.hosts, out, err, c.want)
		}
	}
}

// The agnhost image's nc sends a UDP datagram and prints the answer, as the
// networking checks' `echo hostName | nc -w 1 -u IP PORT` expects, and its
// other forms are busybox's. The image's files run here, chrooted, against
// a UDP server on loopback.
func TestAgnhostE2EImageNetcat(t *testing.T) {
	SkipShort(t, "root and Debian's busybox-static")
	agnhost := filepath.Join(t.TempDir(), "agnhost")
	if err := os.WriteFile(agnhost, []byte("agnhost-binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	images, err := E2EImages(map[string][]string{"agnhost": {"registry.k8s.io/e2e-test-images/agnhost:2.63.0"}}, E2EBinaries{Agnhost: agnhost}, nil)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	writeImageFiles(t, root, images[0].Files)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte("answer to "+string(buf[:n])), from)
		}
	}()
	_, port, _ := net.SplitHostPort(pc.LocalAddr().String())
	// /proc as in a container: Debian's busybox ash runs its own applet
	// for a name it has through /proc/self/exe, and looks PATH up only
	// where it cannot.
	if err := syscall.Mount("/proc", filepath.Join(root, "proc"), "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(filepath.Join(root, "proc"), syscall.MNT_DETACH) })
	sh := func(script string) (string, error) {
		cmd := exec.CommandContext(t.Context(), "/bin/sh", "-c", script)
		cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := sh("echo hostName | nc -w 1 -u 127.0.0.1 " + port + " | grep -v '^\\s*$'"); err != nil || out != "answer to hostName\n" {
		t.Errorf("nc -w 1 -u: %q (%v), want the server's answer", out, err)
	}
	// -f FILE (a file instead of the network) is busybox's alone.
	if out, err := sh(": | nc -f /etc/group | head -1"); err != nil || out != "root:x:0:\n" {
		t.Errorf("nc -f /etc/group: %q (%v), want busybox's nc to print the file", out, err)
	}
}

// writeImageFiles lays an image's files out under root.
func writeImageFiles(t *testing.T, root string, files []ImageFile) {
	t.Helper()
	for _, f := range files {
		p := filepath.Join(root, f.Path)
		var err error
		switch {
		case f.Mode.IsDir():
			err = os.MkdirAll(p, f.Mode.Perm())
		case f.Mode&fs.ModeSymlink != 0:
			err = os.Symlink(f.Link, p)
		default:
			err = os.WriteFile(p, f.Data, f.Mode.Perm())
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// The pause image lies under /var/registry as agnhost's fake-registry-server
// reads it: the tag file names the manifest's digest, the manifest lies at
// its digest's path and names blobs that lie at theirs, every directory
// above them comes first, and each file is the content of its digest.
func TestFakeRegistryFiles(t *testing.T) {
	files, err := fakeRegistryFiles("var/registry", "pause", "testing", pauseConfig, pauseFiles([]byte("pause-binary")))
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]ImageFile{}
	for _, f := range files {
		if parent := filepath.Dir(f.Path); parent != "var" && !byPath[parent].Mode.IsDir() {
			t.Errorf("%s comes before its directory %s", f.Path, parent)
		}
		byPath[f.Path] = f
	}
	// digestPath is where the server looks for a digest (registryserver.go
	// digestToPath).
	digestPath := func(kind, digest string) string {
		hexSum := strings.TrimPrefix(digest, "sha256:")
		return "var/registry/pause/" + kind + "/sha256/" + hexSum[:2] + "/" + hexSum + "/data"
	}
	content := func(kind, digest string) []byte {
		f, ok := byPath[digestPath(kind, digest)]
		if !ok {
			t.Fatalf("no %s %s", kind, digest)
		}
		if got := blobDigest(f.Data); got != digest {
			t.Errorf("%s at %s has digest %s", kind, digest, got)
		}
		return f.Data
	}
	manifestDigest := strings.TrimSpace(string(byPath["var/registry/pause/manifests/testing"].Data))
	var manifest struct {
		MediaType string
		Config    struct{ Digest string }
		Layers    []struct{ Digest string }
	}
	if err := json.Unmarshal(content("manifests", manifestDigest), &manifest); err != nil {
		t.Fatal(err)
	}
	if manifest.MediaType != ociManifestType || len(manifest.Layers) != 1 {
		t.Fatalf("manifest %+v", manifest)
	}
	content("blobs", manifest.Config.Digest)
	layer := content("blobs", manifest.Layers[0].Digest)
	if !bytes.Contains(layer, []byte("pause-binary")) {
		t.Error("the layer does not hold the pause binary")
	}
}
