package testenv

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sort"
	"strings"
	"time"
)

// Names of the images BuildCRIImages makes: busybox under the name `image:
// busybox` resolves to, and the sandbox image containerd 1.6's CRI plugin
// runs by default (its sandbox_image).
const (
	BusyboxImage = "docker.io/library/busybox:latest"
	PauseImage   = "registry.k8s.io/pause:3.6"
)

// BusyboxPathEnv overrides where the static busybox is taken from (default
// /bin/busybox, Debian's busybox-static).
const BusyboxPathEnv = "SPLITLET_BUSYBOX"

// ImageFile is one entry of an image's only layer.
type ImageFile struct {
	// Path in the image, relative to its root ("bin/sh").
	Path string
	// Mode holds the permission bits (with fs.ModeSetuid and
	// fs.ModeSticky), and fs.ModeDir for a directory or fs.ModeSymlink for
	// a symbolic link to Link.
	Mode fs.FileMode
	Link string
	Data []byte
}

// ImageConfig is the part of an image's configuration a container starts
// from.
type ImageConfig struct {
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	// User the container runs as ("1234"; empty: root).
	User string
}

// epoch is the time stamped on every entry, so that an image built twice
// from the same files has the same digests (a second import is a no-op).
var epoch = time.Unix(0, 0).UTC()

// WriteImageArchive writes a single-layer image in the docker-archive
// format (what `docker save` writes and `ctr images import` reads) under the
// given names.
func WriteImageArchive(w io.Writer, names []string, cfg ImageConfig, files []ImageFile) error {
	layer, config, err := imageBlobs(cfg, files)
	if err != nil {
		return err
	}
	layerSum := sha256.Sum256(layer)
	layerHex := hex.EncodeToString(layerSum[:])
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	layerName := layerHex + "/layer.tar"
	manifest, err := json.Marshal([]map[string]any{{"Config": configName, "RepoTags": names, "Layers": []string{layerName}}})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	for _, e := range []struct {
		name string
		data []byte
	}{{layerHex + "/", nil}, {layerName, layer}, {configName, config}, {"manifest.json", manifest}} {
		h := &tar.Header{Name: e.name, ModTime: epoch, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(e.data))}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag, h.Mode, h.Size = tar.TypeDir, 0o755, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// imageBlobs makes an image's only layer (an uncompressed tar of files)
// and its configuration.
func imageBlobs(cfg ImageConfig, files []ImageFile) (layer, config []byte, err error) {
	var buf bytes.Buffer
	lw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.Path, ModTime: epoch, Format: tar.FormatPAX, Mode: int64(f.Mode.Perm())}
		if f.Mode&fs.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		if f.Mode&fs.ModeSetuid != 0 {
			h.Mode |= 0o4000
		}
		switch {
		case f.Mode&fs.ModeDir != 0:
			h.Typeflag, h.Name = tar.TypeDir, strings.TrimSuffix(f.Path, "/")+"/"
		case f.Mode&fs.ModeSymlink != 0:
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := lw.WriteHeader(h); err != nil {
			return nil, nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := lw.Write(f.Data); err != nil {
				return nil, nil, err
			}
		}
	}
	if err := lw.Close(); err != nil {
		return nil, nil, err
	}
	layerSum := sha256.Sum256(buf.Bytes())
	config, err = json.Marshal(map[string]any{
		"architecture": goruntime.GOARCH,
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config": map[string]any{
			"Entrypoint": cfg.Entrypoint,
			"Cmd":        cfg.Cmd,
			"Env":        cfg.Env,
			"WorkingDir": cfg.WorkingDir,
			"User":       cfg.User,
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(layerSum[:])}},
	})
	return buf.Bytes(), config, err
}

// baseFiles are the directories and files every image here has: what a
// shell and the runtime expect to find.
func baseFiles() []ImageFile {
	dir := fs.ModeDir | 0o755
	return []ImageFile{
		{Path: "bin", Mode: dir}, {Path: "dev", Mode: dir}, {Path: "etc", Mode: dir},
		{Path: "proc", Mode: dir}, {Path: "sys", Mode: dir}, {Path: "root", Mode: fs.ModeDir | 0o700},
		{Path: "tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777}, {Path: "var", Mode: dir},
		{Path: "etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")},
		{Path: "etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnogroup:x:65534:\n")},
	}
}

// BusyboxImageFiles are the files of the busybox image: the static busybox
// at path as /bin/busybox and a symbolic link to it for each of its applets
// (sh, sleep, echo, cat, httpd, ...).
func BusyboxImageFiles(path string) ([]ImageFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("testenv: busybox image: %w (install Debian's busybox-static or set %s)", err, BusyboxPathEnv)
	}
	out, err := exec.Command(path, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("testenv: busybox image: %s --list: %w", path, err)
	}
	files := append(baseFiles(), ImageFile{Path: "bin/busybox", Mode: 0o755, Data: data})
	applets := strings.Fields(string(out))
	sort.Strings(applets)
	for _, a := range applets {
		if a == "busybox" || strings.Contains(a, "/") {
			continue
		}
		files = append(files, ImageFile{Path: "bin/" + a, Mode: fs.ModeSymlink, Link: "busybox"})
	}
	if !slices.Contains(applets, "nmeter") {
		files = append(files, ImageFile{Path: "bin/nmeter", Mode: 0o755, Data: []byte(nmeterScript)})
	}
	return files, nil
}

// nmeterScript stands in for busybox's nmeter applet where the busybox
// lacks it (Debian's): the node suite's container lifecycle specs stamp
// their log lines with `date -u +%FT$(nmeter -d0 '%3t' | head -n1)Z`, the
// UTC time of day with milliseconds, which busybox's date cannot print.
// It prints that (adjtimex's seconds and microseconds) again and again
// (nmeter -d0: no delay), whatever the arguments, until its output is
// closed.
const nmeterScript = `#!/bin/sh
# nmeter stand-in: the time of day as nmeter's %3t prints it (HH:MM:SS.mmm, UTC)
while :; do
	set -- $(adjtimex | sed -n 's/^ *time.tv_sec: *//p; s/^ *time.tv_usec: *//p')
	s=$(($1 % 86400))
	printf '%02d:%02d:%02d.%03d\n' $((s / 3600)) $((s % 3600 / 60)) $((s % 60)) $(($2 / 1000)) || exit 0
done
`

// RepoRoot is the directory of the go.work file above the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testenv: no go.work above the working directory")
		}
		dir = parent
	}
}

// BuildCRIImages writes the busybox and the sandbox ("pause") image as
// docker archives into dir and returns their paths; the sandbox image is
// named sandboxImage (PauseImage when empty). Nothing is pulled: the
// busybox image carries the static busybox (BusyboxPathEnv, default
// /bin/busybox), the pause image a static build of ./libs/testenv/pause
// (so it needs the Go toolchain and the Splitlet checkout).
func BuildCRIImages(dir, sandboxImage string) ([]string, error) {
	if sandboxImage == "" {
		sandboxImage = PauseImage
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	busybox := os.Getenv(BusyboxPathEnv)
	if busybox == "" {
		busybox = "/bin/busybox"
	}
	files, err := BusyboxImageFiles(busybox)
	if err != nil {
		return nil, err
	}
	bbPath := filepath.Join(dir, "busybox.tar")
	if err := writeArchiveFile(bbPath, []string{BusyboxImage}, busyboxConfig, files); err != nil {
		return nil, err
	}

	data, err := buildPause(dir)
	if err != nil {
		return nil, err
	}
	pausePath := filepath.Join(dir, "pause.tar")
	if err := writeArchiveFile(pausePath, []string{sandboxImage}, pauseConfig, pauseFiles(data)); err != nil {
		return nil, err
	}
	return []string{bbPath, pausePath}, nil
}

// busyboxConfig is the busybox image's configuration.
var busyboxConfig = ImageConfig{Cmd: []string{"sh"}, Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}

// pauseConfig and pauseFiles make the sandbox image of a pause binary.
var pauseConfig = ImageConfig{Entrypoint: []string{"/pause"}}

func pauseFiles(data []byte) []ImageFile {
	return append(baseFiles(), ImageFile{Path: "pause", Mode: 0o755, Data: data})
}

// buildPause builds ./libs/testenv/pause statically into dir and returns
// the binary.
func buildPause(dir string) ([]byte, error) { return buildStatic(dir, "pause") }

// buildStatic builds the command ./libs/testenv/<name> statically into dir
// and returns the binary.
func buildStatic(dir, name string) ([]byte, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, name)
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./libs/testenv/"+name)
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("testenv: build ./libs/testenv/%s: %w\n%s", name, err, out)
	}
	return os.ReadFile(bin)
}

func writeArchiveFile(path string, names []string, cfg ImageConfig, files []ImageFile) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteImageArchive(f, names, cfg, files); err != nil {
		f.Close()
		return fmt.Errorf("testenv: write %s: %w", path, err)
	}
	return f.Close()
}
