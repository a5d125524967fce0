package testenv

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// The test images of Kubernetes' e2e suite (test/utils/image/manifest.go,
// `e2e.test --list-images` prints their names) that can be made here FROM
// scratch, by repository (the name without its tag). Each is built under
// every name (tag) of that repository the suite lists.
var e2eImageRepos = map[string]string{
	"registry.k8s.io/e2e-test-images/agnhost":           "agnhost",
	"registry.k8s.io/e2e-test-images/busybox":           "busybox",
	"registry.k8s.io/e2e-test-images/glibc-dns-testing": "glibc-dns-testing",
	"registry.k8s.io/e2e-test-images/kitten":            "kitten",
	"registry.k8s.io/e2e-test-images/nonroot":           "nonroot",
	"registry.k8s.io/e2e-test-images/nonewprivs":        "nonewprivs",
	"registry.k8s.io/e2e-test-images/nginx":             "nginx",
	"registry.k8s.io/pause":                             "pause",
}

// E2EBinaries are the static binaries the e2e test images are made of.
type E2EBinaries struct {
	// Busybox: a static busybox (default $SPLITLET_BUSYBOX, else
	// /bin/busybox); every image but pause has it with its applet links.
	Busybox string
	// Shell: a static bash (default $SPLITLET_E2E_SHELL, else
	// /bin/bash-static, Debian's bash-static), which the busybox image's
	// /bin/sh runs for an environment with variables whose names are not
	// shell names (data-1): the ConfigMap and Secret env specs run
	// `sh -c env` and expect them, and Debian's busybox 1.35 sh drops them.
	Shell string
	// ShellChooser: the e2esh binary (./libs/testenv/e2esh), the busybox
	// image's /bin/sh: busybox's sh, or the bash above for such an
	// environment. Empty: it is built.
	ShellChooser string
	// Netcat: the e2enc binary (./libs/testenv/e2enc), the agnhost
	// image's nc: busybox's, with the UDP client the networking checks
	// use. Empty: it is built.
	Netcat string
	// Agnhost: the agnhost binary (k8s.io/kubernetes/test/images/agnhost),
	// the agnhost image's entrypoint /agnhost. Empty: no agnhost image.
	Agnhost string
	// AgnhostTLS: a directory with the localhost.crt and localhost.key the
	// agnhost image carries at / (its porter/ files, for the servers it
	// runs with TLS); empty: none.
	AgnhostTLS string
	// Nonewprivs: the nnp binary (k8s.io/kubernetes/test/images/nonewprivs),
	// setuid root in the nonewprivs image. Empty: no nonewprivs image.
	Nonewprivs string
	// Pause: a pause binary; empty: ./libs/testenv/pause is built.
	Pause string
}

// E2EImage is one image to build, under all its names.
type E2EImage struct {
	Kind   string // agnhost, busybox, glibc-dns-testing, kitten, nginx, nonroot, nonewprivs, pause
	Names  []string
	Config ImageConfig
	Files  []ImageFile
}

// PlanE2EImages sorts the image names the e2e suite uses into the images
// buildable here (kinds with their names, sorted) and the names left out,
// with why.
func PlanE2EImages(names []string, bins E2EBinaries) (kinds map[string][]string, leftOut map[string]string) {
	kinds, leftOut = map[string][]string{}, map[string]string{}
	for _, name := range names {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		repo := name
		if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
			repo = name[:i]
		}
		kind, ok := e2eImageRepos[repo]
		switch {
		case !ok:
			leftOut[name] = "no FROM scratch build of this image here"
		case kind == "agnhost" && bins.Agnhost == "":
			leftOut[name] = "no agnhost binary"
		case kind == "nonewprivs" && bins.Nonewprivs == "":
			leftOut[name] = "no nnp binary"
		default:
			kinds[kind] = append(kinds[kind], name)
		}
	}
	for k := range kinds {
		sort.Strings(kinds[k])
	}
	return kinds, leftOut
}

// E2EImages returns the images PlanE2EImages chose, with their files read
// from bins.
func E2EImages(kinds map[string][]string, bins E2EBinaries, pause []byte) ([]E2EImage, error) {
	var bbFiles []ImageFile
	needBusybox := false
	for k := range kinds {
		needBusybox = needBusybox || k != "pause"
	}
	if needBusybox {
		var err error
		if bbFiles, err = BusyboxImageFiles(busyboxPath(bins)); err != nil {
			return nil, err
		}
	}
	// withBusybox is the busybox image's files and more (a copy: the
	// images do not share a backing array).
	withBusybox := func(more ...ImageFile) []ImageFile {
		return append(append([]ImageFile(nil), bbFiles...), more...)
	}
	// withE2ESh is withBusybox with e2esh as /bin/sh and its bash; both
	// are read (e2esh built) once, for the images that have them.
	shell := sync.OnceValues(func() (e2eShell, error) { return readE2EShell(bins) })
	withE2ESh := func(more ...ImageFile) ([]ImageFile, error) {
		sh, err := shell()
		if err != nil {
			return nil, err
		}
		return replaceFile(withBusybox(append(append([]ImageFile(nil), sh.files...), more...)...), sh.sh), nil
	}
	var out []E2EImage
	kindNames := make([]string, 0, len(kinds))
	for k := range kinds {
		kindNames = append(kindNames, k)
	}
	sort.Strings(kindNames)
	for _, kind := range kindNames {
		img := E2EImage{Kind: kind, Names: kinds[kind]}
		var err error
		switch kind {
		case "busybox":
			img.Config, img.Files, err = busyboxE2EImage(withE2ESh)
		case "glibc-dns-testing":
			img.Config, img.Files = busyboxConfig, withBusybox(glibcDNSFiles()...)
		case "kitten":
			img.Config, img.Files = kittenConfig, withBusybox(kittenFiles()...)
		case "nonroot":
			// As test/images/nonroot: busybox that runs as uid 1234.
			img.Config, img.Files = busyboxConfig, withBusybox()
			img.Config.User = "1234"
		case "agnhost":
			img.Config, img.Files, err = agnhostImage(bins, pause, withE2ESh)
		case "nginx":
			img.Config, img.Files = nginxConfig, withBusybox(nginxFiles()...)
		case "nonewprivs":
			img.Config, img.Files, err = nonewprivsImage(bins, withBusybox)
		case "pause":
			img.Config, img.Files = pauseConfig, pauseFiles(pause)
		default:
			return nil, fmt.Errorf("testenv: e2e images: unknown kind %q", kind)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, img)
	}
	return out, nil
}

// busyboxPath is the busybox binary the images are made of: bins.Busybox,
// else $BusyboxPathEnv, else /bin/busybox.
func busyboxPath(bins E2EBinaries) string {
	if bins.Busybox != "" {
		return bins.Busybox
	}
	if env := os.Getenv(BusyboxPathEnv); env != "" {
		return env
	}
	return "/bin/busybox"
}

// ShellPathEnv overrides where the busybox test image's /bin/sh is taken
// from (E2EBinaries.Shell).
const ShellPathEnv = "SPLITLET_E2E_SHELL"

// shellPath is the busybox test image's /bin/sh: bins.Shell, else
// $ShellPathEnv, else /bin/bash-static.
func shellPath(bins E2EBinaries) string {
	if bins.Shell != "" {
		return bins.Shell
	}
	if env := os.Getenv(ShellPathEnv); env != "" {
		return env
	}
	return "/bin/bash-static"
}

// busyboxE2EImage is busybox with e2esh as /bin/sh and a static bash
// beside it (see E2EBinaries.Shell); the other applets stay busybox's.
func busyboxE2EImage(withE2ESh func(...ImageFile) ([]ImageFile, error)) (ImageConfig, []ImageFile, error) {
	files, err := withE2ESh()
	return busyboxConfig, files, err
}

// e2eShell is what an image with e2esh as its sh carries: the static bash
// e2esh may run (and the directories above it), and /bin/sh itself.
type e2eShell struct {
	files []ImageFile
	sh    ImageFile
}

// readE2EShell reads the static bash and e2esh (built here when bins
// names none).
func readE2EShell(bins E2EBinaries) (e2eShell, error) {
	bash, err := os.ReadFile(shellPath(bins))
	if err != nil {
		return e2eShell{}, fmt.Errorf("testenv: e2e images: their bash: %w (install Debian's bash-static or set %s)", err, ShellPathEnv)
	}
	chooser, err := staticTool(bins.ShellChooser, "e2esh")
	if err != nil {
		return e2eShell{}, err
	}
	dir := fs.ModeDir | 0o755
	return e2eShell{
		files: []ImageFile{{Path: "usr", Mode: dir}, {Path: "usr/libexec", Mode: dir},
			{Path: "usr/libexec/e2esh", Mode: dir}, {Path: "usr/libexec/e2esh/bash", Mode: 0o755, Data: bash}},
		sh: ImageFile{Path: "bin/sh", Mode: 0o755, Data: chooser},
	}, nil
}

// staticTool is the binary at path, else ./libs/testenv/<name> built here.
func staticTool(path, name string) ([]byte, error) {
	if path != "" {
		return readImageFile(path)
	}
	dir, err := os.MkdirTemp("", name)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	return buildStatic(dir, name)
}

// readImageFile reads a file that goes into an image.
func readImageFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("testenv: e2e images: %w", err)
	}
	return data, nil
}

// curlScript is the agnhost image's curl: busybox wget with the body on
// stdout, taking the options the tests give curl (those without effect
// here are dropped, --max-time is busybox timeout around wget, whose own
// -T crashes Debian's busybox 1.35, --connect-timeout is under it) and
// refusing others, as wget would refuse curl's.
const curlScript = `#!/bin/sh
# curl [options] URL: busybox wget, the body on stdout, as the tests use it
limit=""
while [ $# -gt 0 ]; do
	case "$1" in
	-g|-q|-s|-S|-f|-L|-k|--globoff|--silent|--show-error|--fail|--location|--insecure) ;;
	-m|--max-time) limit="timeout $2"; shift ;;
	--connect-timeout) shift ;;
	--) shift; break ;;
	-*) echo "curl (wget stand-in): option $1 not supported" >&2; exit 2 ;;
	*) break ;;
	esac
	shift
done
exec $limit wget -q -O - "$@"
`

// agnhostImage is /agnhost (entrypoint, `pause` by default) and busybox,
// for the tests that run `sh -c` in it; with a pause binary, also the
// pause image under /var/registry as its fake-registry-server serves it.
func agnhostImage(bins E2EBinaries, pause []byte, withE2ESh func(...ImageFile) ([]ImageFile, error)) (ImageConfig, []ImageFile, error) {
	data, err := readImageFile(bins.Agnhost)
	if err != nil {
		return ImageConfig{}, nil, err
	}
	nc, err := staticTool(bins.Netcat, "e2enc")
	if err != nil {
		return ImageConfig{}, nil, err
	}
	// As the real image: /agnhost-2 a link to it, /uploads, a user
	// and a group defined in the image (uid 1000, gid 50000).
	config := ImageConfig{Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}, Env: busyboxConfig.Env}
	// its sh is e2esh, which runs the script that names nc in bash, whose
	// PATH lookup finds the image's nc (busybox's ash runs its own).
	files, err := withE2ESh(ImageFile{Path: "agnhost", Mode: 0o755, Data: data},
		ImageFile{Path: "agnhost-2", Mode: fs.ModeSymlink, Link: "agnhost"},
		ImageFile{Path: "uploads", Mode: fs.ModeDir | 0o755},
		// The real image has curl (the lifecycle hook tests' exec
		// hooks run `curl http://...`, the networking checks `curl -g
		// -q -s --max-time 15 --connect-timeout 1 http://...`);
		// busybox's wget does that.
		ImageFile{Path: "bin/curl", Mode: 0o755, Data: []byte(curlScript)},
		// and bash (the probe specs run `/bin/bash -c` scripts that
		// busybox's sh runs as well).
		ImageFile{Path: "bin/bash", Mode: 0o755, Data: []byte("#!/bin/sh\n# bash: busybox's sh, which runs what the tests give bash\nexec /bin/sh \"$@\"\n")})
	if err != nil {
		return ImageConfig{}, nil, err
	}
	// and nc with UDP (the networking checks' `nc -w 1 -u`).
	files = replaceFile(files, ImageFile{Path: "bin/nc", Mode: 0o755, Data: nc})
	files = replaceFile(files, ImageFile{Path: "etc/passwd", Mode: 0o644, Data: []byte(
		"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\nuser-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n")})
	files = replaceFile(files, ImageFile{Path: "etc/group", Mode: 0o644, Data: []byte(
		"root:x:0:\nnogroup:x:65534:\nuser-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n")})
	if pause != nil {
		reg, err := fakeRegistryFiles("var/registry", "pause", "testing", pauseConfig, pauseFiles(pause))
		if err != nil {
			return ImageConfig{}, nil, err
		}
		files = append(files, reg...)
	}
	if bins.AgnhostTLS != "" {
		for _, name := range []string{"localhost.crt", "localhost.key"} {
			data, err := readImageFile(filepath.Join(bins.AgnhostTLS, name))
			if err != nil {
				return ImageConfig{}, nil, err
			}
			files = append(files, ImageFile{Path: name, Mode: 0o644, Data: data})
		}
	}
	return config, files, nil
}

// glibcDNSFiles make busybox a stand-in for the glibc-dns-testing image,
// whose `hostname -f` the hostname specs compare with the pod's FQDN:
// Debian's busybox-static is glibc, statically linked, so its hostname
// applet resolves the name as glibc does (gethostbyname: the first name of
// the /etc/hosts line the node agent wrote for the pod), given the
// nsswitch.conf of the real image's Debian base (files before DNS).
func glibcDNSFiles() []ImageFile {
	return []ImageFile{{Path: "etc/nsswitch.conf", Mode: 0o644, Data: []byte("hosts: files dns\nnetworks: files\n")}}
}

// fakeRegistryFiles lay an image out as agnhost's fake-registry-server
// serves it from dir (the real image's /var/registry holds pause:testing,
// which the private registry specs pull with and without a pull secret):
// <repo>/manifests/<tag> holds the manifest's digest,
// <repo>/manifests/sha256/<2>/<hex>/data the manifest and
// <repo>/blobs/sha256/<2>/<hex>/data each blob, with the directories above
// them.
func fakeRegistryFiles(dir, repo, tag string, cfg ImageConfig, files []ImageFile) ([]ImageFile, error) {
	layer, config, err := imageBlobs(cfg, files)
	if err != nil {
		return nil, err
	}
	manifest, err := ociManifest(layer, config)
	if err != nil {
		return nil, err
	}
	base := dir + "/" + repo
	var out []ImageFile
	seen := map[string]bool{}
	add := func(path string, data []byte) {
		parts := strings.Split(path, "/")
		for i := 1; i < len(parts); i++ {
			if d := strings.Join(parts[:i], "/"); !seen[d] && d != "var" {
				seen[d] = true
				out = append(out, ImageFile{Path: d, Mode: fs.ModeDir | 0o755})
			}
		}
		out = append(out, ImageFile{Path: path, Mode: 0o644, Data: data})
	}
	byDigest := func(kind string, data []byte) string {
		hexSum := strings.TrimPrefix(blobDigest(data), "sha256:")
		return base + "/" + kind + "/sha256/" + hexSum[:2] + "/" + hexSum + "/data"
	}
	add(base+"/manifests/"+tag, []byte(blobDigest(manifest)+"\n"))
	add(byDigest("manifests", manifest), manifest)
	add(byDigest("blobs", layer), layer)
	add(byDigest("blobs", config), config)
	return out, nil
}

// kittenConfig and kittenFiles make the kitten image the image volume
// specs mount (test/images/kitten: agnhost, Alpine-based, with
// data.json and kitten.jpg at /): busybox, /data.json as the real one, and
// the /etc/os-release of its Alpine base, the two files the specs read.
var kittenConfig = ImageConfig{Cmd: []string{"test-webserver"}, Env: busyboxConfig.Env}

func kittenFiles() []ImageFile {
	return []ImageFile{
		{Path: "data.json", Mode: 0o644, Data: []byte("{\n  \"image\": \"kitten.jpg\"\n}\n")},
		{Path: "etc/os-release", Mode: 0o644, Data: []byte("NAME=\"Alpine Linux\"\nID=alpine\nPRETTY_NAME=\"Alpine Linux\"\nHOME_URL=\"https://alpinelinux.org/\"\n")},
	}
}

// nonewprivsImage is as test/images/nonewprivs: nnp, setuid root, prints
// its effective uid.
func nonewprivsImage(bins E2EBinaries, withBusybox func(...ImageFile) []ImageFile) (ImageConfig, []ImageFile, error) {
	data, err := readImageFile(bins.Nonewprivs)
	if err != nil {
		return ImageConfig{}, nil, err
	}
	dir := fs.ModeDir | 0o755
	config := ImageConfig{Cmd: []string{"nnp"}, Env: busyboxConfig.Env}
	files := withBusybox(ImageFile{Path: "usr", Mode: dir}, ImageFile{Path: "usr/local", Mode: dir},
		ImageFile{Path: "usr/local/bin", Mode: dir}, ImageFile{Path: "usr/local/bin/nnp", Mode: fs.ModeSetuid | 0o755, Data: data})
	return config, files, nil
}

// nginxConfig and nginxFiles make a stand-in for the nginx test image out
// of busybox: its command (nginx -g "daemon off;") runs /usr/sbin/nginx, a
// script that serves /usr/share/nginx/html on port 80 with busybox's httpd
// in the foreground, keeps its own PID in /var/run/nginx.pid and goes on
// SIGTERM at once, as nginx does. Enough for the specs that only run it
// (the node suite's mirror pods); not nginx.
var nginxConfig = ImageConfig{Cmd: []string{"nginx", "-g", "daemon off;"}, Env: busyboxConfig.Env}

func nginxFiles() []ImageFile {
	dir := fs.ModeDir | 0o755
	script := `#!/bin/sh
# nginx stand-in (busybox httpd on port 80); the arguments are nginx's, ignored
mkdir -p /var/run
echo $$ > /var/run/nginx.pid
httpd -f -p 80 -h /usr/share/nginx/html &
child=$!
trap 'kill $child 2>/dev/null; exit 0' TERM INT QUIT
wait $child
`
	return []ImageFile{
		{Path: "usr", Mode: dir}, {Path: "usr/sbin", Mode: dir}, {Path: "usr/share", Mode: dir},
		{Path: "usr/share/nginx", Mode: dir}, {Path: "usr/share/nginx/html", Mode: dir},
		{Path: "usr/share/nginx/html/index.html", Mode: 0o644, Data: []byte("<h1>Welcome to nginx!</h1>\n")},
		{Path: "usr/sbin/nginx", Mode: 0o755, Data: []byte(script)},
	}
}

// replaceFile puts f in place of the file of the same path (or appends it).
func replaceFile(files []ImageFile, f ImageFile) []ImageFile {
	for i := range files {
		if files[i].Path == f.Path {
			files[i] = f
			return files
		}
	}
	return append(files, f)
}

// BuildE2EImages writes the e2e test images buildable here, of the names
// given (`e2e.test --list-images`), as docker archives into dir. It returns
// the archives, the names built and the names left out with why.
func BuildE2EImages(dir string, names []string, bins E2EBinaries) (archives, built []string, leftOut map[string]string, err error) {
	images, leftOut, err := PrepareE2EImages(dir, names, bins)
	if err != nil {
		return nil, nil, nil, err
	}
	archives, built, err = WriteE2EArchives(dir, images)
	return archives, built, leftOut, err
}

// PrepareE2EImages plans the e2e test images buildable here, of the names
// given, and reads their files (building the pause binary into dir when
// bins has none); it returns them and the names left out with why.
func PrepareE2EImages(dir string, names []string, bins E2EBinaries) (images []E2EImage, leftOut map[string]string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	kinds, leftOut := PlanE2EImages(names, bins)
	var pause []byte
	if len(kinds["pause"]) > 0 {
		if bins.Pause != "" {
			pause, err = os.ReadFile(bins.Pause)
		} else {
			pause, err = buildPause(dir)
		}
		if err != nil {
			return nil, nil, err
		}
	}
	images, err = E2EImages(kinds, bins, pause)
	return images, leftOut, err
}

// WriteE2EArchives writes each image as a docker archive into dir and
// returns the archives and the names built, sorted.
func WriteE2EArchives(dir string, images []E2EImage) (archives, built []string, err error) {
	for _, img := range images {
		path := filepath.Join(dir, "e2e-"+img.Kind+".tar")
		if err := writeArchiveFile(path, img.Names, img.Config, img.Files); err != nil {
			return nil, nil, err
		}
		archives = append(archives, path)
		built = append(built, img.Names...)
	}
	sort.Strings(built)
	return archives, built, nil
}
