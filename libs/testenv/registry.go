package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// RegistryBinary is the CNCF distribution registry `make testenv` builds
// into BinDir (hack/testenv/registry).
const RegistryBinary = "registry"

// Registry is a CNCF distribution registry on 127.0.0.1 that takes only
// its one user (htpasswd basic auth, plain HTTP: containerd pulls from a
// loopback registry over HTTP without any host configuration).
type Registry struct {
	// Host is host:port, the registry part of its images' names.
	Host string
	// User and Password are the one account; the password is random.
	User, Password string
	proc           *process
}

// StartRegistry starts a registry whose files live under dir, and waits
// until it answers (and refuses an anonymous client).
func StartRegistry(ctx context.Context, dir string) (*Registry, error) {
	bin, err := Binary(RegistryBinary)
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	r := &Registry{Host: fmt.Sprintf("127.0.0.1:%d", port), User: "splitlet-test", Password: randomHex(16)}
	hash, err := bcrypt.GenerateFromPassword([]byte(r.Password), bcrypt.MinCost)
	if err != nil {
		return nil, err
	}
	htpasswd := filepath.Join(dir, "htpasswd")
	if err := os.WriteFile(htpasswd, []byte(r.User+":"+string(hash)+"\n"), 0o600); err != nil {
		return nil, err
	}
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
http:
  addr: %s
auth:
  htpasswd:
    realm: splitlet-test
    path: %s
`, filepath.Join(dir, "data"), r.Host, htpasswd)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	r.proc, err = startProcess("registry", filepath.Join(dir, "registry.log"), bin, "serve", cfgPath)
	if err != nil {
		return nil, err
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = r.proc.waitFor(waitCtx, "answering", func() error {
		resp, err := http.Get("http://" + r.Host + "/v2/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			return fmt.Errorf("anonymous GET /v2/: %s, want 401", resp.Status)
		}
		return nil
	})
	if err != nil {
		r.Stop()
		return nil, err
	}
	return r, nil
}

// Stop stops the registry.
func (r *Registry) Stop() {
	if r != nil && r.proc != nil {
		r.proc.stop(5 * time.Second)
	}
}

// DockerConfigJSON is a .dockerconfigjson for the registry's account, the
// data of a kubernetes.io/dockerconfigjson Secret.
func (r *Registry) DockerConfigJSON() []byte {
	auth := base64.StdEncoding.EncodeToString([]byte(r.User + ":" + r.Password))
	data, _ := json.Marshal(map[string]any{"auths": map[string]any{
		r.Host: map[string]string{"username": r.User, "password": r.Password, "auth": auth},
	}})
	return data
}

// Image names repo:tag in the registry.
func (r *Registry) Image(repo, tag string) string { return r.Host + "/" + repo + ":" + tag }

// Push uploads a single-layer image of files as repo:tag (an OCI manifest,
// gzip-free layer), and returns its name.
func (r *Registry) Push(ctx context.Context, repo, tag string, cfg ImageConfig, files []ImageFile) (string, error) {
	layer, config, err := imageBlobs(cfg, files)
	if err != nil {
		return "", err
	}
	for _, blob := range [][]byte{layer, config} {
		if _, err := r.pushBlob(ctx, repo, blob); err != nil {
			return "", err
		}
	}
	manifest, err := ociManifest(layer, config)
	if err != nil {
		return "", err
	}
	u := "http://" + r.Host + "/v2/" + repo + "/manifests/" + tag
	if _, err := r.do(ctx, http.MethodPut, u, ociManifestType, manifest, http.StatusCreated); err != nil {
		return "", fmt.Errorf("testenv: push the manifest of %s: %w", repo, err)
	}
	return r.Image(repo, tag), nil
}

// ociManifestType is the media type of ociManifest's manifests.
const ociManifestType = "application/vnd.oci.image.manifest.v1+json"

// ociManifest is the OCI manifest of a single-layer image (imageBlobs'
// layer, uncompressed, and config).
func ociManifest(layer, config []byte) ([]byte, error) {
	return json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     ociManifestType,
		"config":        map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": blobDigest(config), "size": len(config)},
		"layers":        []map[string]any{{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": blobDigest(layer), "size": len(layer)}},
	})
}

// blobDigest is a blob's content digest ("sha256:<hex>").
func blobDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// PushBusybox pushes the busybox image (BuildCRIImages' files) as repo:tag,
// with a file naming repo:tag (etc/splitlet-test-image) besides: an image of
// its own, whose removal from containerd (CRI RemoveImage removes every
// name of an image) never takes the imported busybox with it.
func (r *Registry) PushBusybox(ctx context.Context, repo, tag string) (string, error) {
	busybox := os.Getenv(BusyboxPathEnv)
	if busybox == "" {
		busybox = "/bin/busybox"
	}
	files, err := BusyboxImageFiles(busybox)
	if err != nil {
		return "", err
	}
	files = append(files, ImageFile{Path: "etc/splitlet-test-image", Mode: 0o644, Data: []byte(repo + ":" + tag + "\n")})
	return r.Push(ctx, repo, tag, busyboxConfig, files)
}

// pushBlob uploads one blob (a monolithic upload) and returns its digest.
func (r *Registry) pushBlob(ctx context.Context, repo string, data []byte) (string, error) {
	digest := blobDigest(data)
	resp, err := r.do(ctx, http.MethodPost, "http://"+r.Host+"/v2/"+repo+"/blobs/uploads/", "", nil, http.StatusAccepted)
	if err != nil {
		return "", fmt.Errorf("testenv: start a blob upload to %s: %w", repo, err)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		return "", err
	}
	loc = (&url.URL{Scheme: "http", Host: r.Host}).ResolveReference(loc)
	q := loc.Query()
	q.Set("digest", digest)
	loc.RawQuery = q.Encode()
	if _, err := r.do(ctx, http.MethodPut, loc.String(), "application/octet-stream", data, http.StatusCreated); err != nil {
		return "", fmt.Errorf("testenv: upload a blob to %s: %w", repo, err)
	}
	return digest, nil
}

// do sends an authenticated request and wants the status.
func (r *Registry) do(ctx context.Context, method, u, contentType string, body []byte, want int) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.SetBasicAuth(r.User, r.Password)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
	if resp.StatusCode != want {
		return nil, fmt.Errorf("%s %s: %s: %s", method, req.URL.Path, resp.Status, strings.TrimSpace(string(msg)))
	}
	return resp, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// PushMirror pushes every name of the images that lies under upstream (a
// registry host, "registry.k8s.io") as the same repository and tag here
// (registry.k8s.io/e2e-test-images/agnhost:2.63.0 as
// e2e-test-images/agnhost:2.63.0), so that a containerd whose hosts.toml
// (WriteMirrorConfig) sends upstream's pulls here gets them. It returns
// the names pushed.
func (r *Registry) PushMirror(ctx context.Context, upstream string, images []E2EImage) ([]string, error) {
	var pushed []string
	for _, img := range images {
		for _, name := range img.Names {
			rest, ok := strings.CutPrefix(name, upstream+"/")
			i := strings.LastIndex(rest, ":")
			if !ok || i < 0 {
				continue
			}
			if _, err := r.Push(ctx, rest[:i], rest[i+1:], img.Config, img.Files); err != nil {
				return pushed, fmt.Errorf("testenv: mirror %s: %w", name, err)
			}
			pushed = append(pushed, name)
		}
	}
	return pushed, nil
}

// WriteMirrorConfig writes containerd's host configuration
// (<configPath>/<upstream>/hosts.toml, for the CRI plugin's registry
// config_path) that sends upstream's pulls and resolves to this registry
// over plain HTTP, with its account in a fixed Authorization header (the
// pulls of upstream's images carry no pull secret). The file is root's
// alone: it holds the password.
func (r *Registry) WriteMirrorConfig(configPath, upstream string) error {
	dir := filepath.Join(configPath, upstream)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	auth := base64.StdEncoding.EncodeToString([]byte(r.User + ":" + r.Password))
	hosts := fmt.Sprintf(`server = "https://%[1]s"

[host."http://%[2]s"]
  capabilities = ["pull", "resolve"]
  [host."http://%[2]s".header]
    Authorization = "Basic %[3]s"
`, upstream, r.Host, auth)
	return os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o600)
}
