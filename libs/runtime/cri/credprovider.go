package cri

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/distribution/reference"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfigv1 "k8s.io/kubelet/config/v1"
	credentialproviderv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
	"sigs.k8s.io/yaml"
)

// The kubelet's credential provider API versions and kinds.
const (
	credentialProviderConfigAPIVersion = "kubelet.config.k8s.io/v1"
	credentialProviderAPIVersion       = "credentialprovider.kubelet.k8s.io/v1"
	// pluginTimeout bounds one run of a plugin.
	pluginTimeout = time.Minute
)

// CredentialProviders runs the kubelet's credential provider exec plugins
// (its --image-credential-provider-config and -bin-dir): for an image one
// of a plugin's matchImages matches, the plugin gets a
// CredentialProviderRequest on stdin and answers a
// CredentialProviderResponse on stdout, whose credentials are cached as it
// says. What a plugin answers is never logged.
type CredentialProviders struct {
	providers []*credentialProvider
	log       *zap.Logger
}

type credentialProvider struct {
	cfg     kubeletconfigv1.CredentialProvider
	path    string
	matches []keyEntry // matchImages, as registry keys
	mu      sync.Mutex
	cache   map[string]cachedCredentials
}

type cachedCredentials struct {
	kr      *keyring
	expires time.Time
}

// LoadCredentialProviders reads a CredentialProviderConfig (YAML or JSON)
// and finds each plugin, by its name, in binDir. What this runtime cannot
// honour is refused: tokenAttributes (service account tokens for plugins).
func LoadCredentialProviders(configPath, binDir string, log *zap.Logger) (*CredentialProviders, error) {
	data, err := os.ReadFile(configPath)
	if err != nil {
		return nil, fmt.Errorf("credential provider config: %w", err)
	}
	var cfg kubeletconfigv1.CredentialProviderConfig
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return nil, fmt.Errorf("credential provider config %s: %w", configPath, err)
	}
	if cfg.APIVersion != credentialProviderConfigAPIVersion || cfg.Kind != "CredentialProviderConfig" {
		return nil, fmt.Errorf("credential provider config %s: apiVersion %q kind %q, want %s CredentialProviderConfig", configPath, cfg.APIVersion, cfg.Kind, credentialProviderConfigAPIVersion)
	}
	if log == nil {
		log = zap.NewNop()
	}
	cp := &CredentialProviders{log: log}
	seen := map[string]bool{}
	for _, pc := range cfg.Providers {
		p, err := newCredentialProvider(pc, binDir)
		if err != nil {
			return nil, fmt.Errorf("credential provider config %s: %w", configPath, err)
		}
		if seen[pc.Name] {
			return nil, fmt.Errorf("credential provider config %s: provider %q twice", configPath, pc.Name)
		}
		seen[pc.Name] = true
		cp.providers = append(cp.providers, p)
	}
	return cp, nil
}

// newCredentialProvider checks one provider's configuration.
func newCredentialProvider(pc kubeletconfigv1.CredentialProvider, binDir string) (*credentialProvider, error) {
	switch {
	case pc.Name == "" || strings.ContainsAny(pc.Name, `/\`) || pc.Name == "." || pc.Name == "..":
		return nil, fmt.Errorf("provider name %q: must be a file name in the bin directory", pc.Name)
	case len(pc.MatchImages) == 0:
		return nil, fmt.Errorf("provider %q: matchImages is required", pc.Name)
	case pc.DefaultCacheDuration == nil || pc.DefaultCacheDuration.Duration < 0:
		return nil, fmt.Errorf("provider %q: defaultCacheDuration is required and not negative", pc.Name)
	case pc.APIVersion != credentialProviderAPIVersion:
		return nil, fmt.Errorf("provider %q: apiVersion %q, want %s", pc.Name, pc.APIVersion, credentialProviderAPIVersion)
	case pc.TokenAttributes != nil:
		return nil, fmt.Errorf("provider %q: tokenAttributes (service account tokens for plugins) is not supported", pc.Name)
	}
	p := &credentialProvider{cfg: pc, path: filepath.Join(binDir, pc.Name), cache: map[string]cachedCredentials{}}
	if fi, err := os.Stat(p.path); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("provider %q: no executable %s", pc.Name, p.path)
	}
	for _, m := range pc.MatchImages {
		e, err := newKeyEntry(m, dockerAuth{})
		if err != nil {
			return nil, fmt.Errorf("provider %q: matchImages entry %q: %w", pc.Name, m, err)
		}
		p.matches = append(p.matches, e)
	}
	return p, nil
}

// lookup returns the credentials the plugins matching the image give for
// it, in the order of the configuration. A plugin that fails is logged
// (its name and exit, not its output) and skipped, as the kubelet does.
func (cp *CredentialProviders) lookup(ctx context.Context, image string) []*runtimeapi.AuthConfig {
	if cp == nil {
		return nil
	}
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return nil
	}
	host, repoPath := strings.ToLower(reference.Domain(named)), reference.Path(named)
	var out []*runtimeapi.AuthConfig
	for _, p := range cp.providers {
		if !p.matchesImage(host, repoPath) {
			continue
		}
		kr, err := p.credentials(ctx, named.Name(), host)
		if err != nil {
			cp.log.Warn("image credential provider failed", zap.String("provider", p.cfg.Name), zap.String("image", image), zap.Error(err))
			continue
		}
		out = append(out, kr.lookup(image)...)
	}
	return out
}

func (p *credentialProvider) matchesImage(host, repoPath string) bool {
	for _, m := range p.matches {
		if hostMatches(m.host, host) && pathMatches(m.path, repoPath) {
			return true
		}
	}
	return false
}

// credentials answers from the cache or runs the plugin for the image
// (name without tag or digest) of the registry host.
func (p *credentialProvider) credentials(ctx context.Context, image, host string) (*keyring, error) {
	now := time.Now()
	p.mu.Lock()
	for _, key := range []string{"image:" + image, "registry:" + host, "global:"} {
		if c, ok := p.cache[key]; ok {
			if now.Before(c.expires) {
				p.mu.Unlock()
				return c.kr, nil
			}
			delete(p.cache, key)
		}
	}
	p.mu.Unlock()
	resp, err := p.run(ctx, image)
	if err != nil {
		return nil, err
	}
	kr := &keyring{}
	for key, a := range resp.Auth {
		e, err := newKeyEntry(key, dockerAuth{Username: a.Username, Password: a.Password})
		if err != nil {
			continue
		}
		kr.entries = append(kr.entries, e)
	}
	kr.sort()
	ttl := p.cfg.DefaultCacheDuration.Duration
	if resp.CacheDuration != nil {
		ttl = resp.CacheDuration.Duration
	}
	if ttl > 0 {
		key := map[credentialproviderv1.PluginCacheKeyType]string{
			credentialproviderv1.ImagePluginCacheKeyType:    "image:" + image,
			credentialproviderv1.RegistryPluginCacheKeyType: "registry:" + host,
			credentialproviderv1.GlobalPluginCacheKeyType:   "global:",
		}[resp.CacheKeyType]
		p.mu.Lock()
		p.cache[key] = cachedCredentials{kr: kr, expires: now.Add(ttl)}
		p.mu.Unlock()
	}
	return kr, nil
}

// run executes the plugin once with the request on stdin.
func (p *credentialProvider) run(ctx context.Context, image string) (*credentialproviderv1.CredentialProviderResponse, error) {
	req, err := json.Marshal(credentialproviderv1.CredentialProviderRequest{
		TypeMeta: metav1.TypeMeta{APIVersion: credentialProviderAPIVersion, Kind: "CredentialProviderRequest"}, Image: image})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, pluginTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.path, p.cfg.Args...)
	cmd.Env = os.Environ()
	for _, e := range p.cfg.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(req), &stdout, &stderr
	if err := cmd.Run(); err != nil {
		// stderr is the plugin's own account of its failure, not its answer.
		return nil, fmt.Errorf("%w: %s", err, strings.TrimSpace(lastLine(stderr.String())))
	}
	var resp credentialproviderv1.CredentialProviderResponse
	if err := json.Unmarshal(stdout.Bytes(), &resp); err != nil {
		return nil, errors.New("its response is not a CredentialProviderResponse: " + jsonErrorKind(err))
	}
	if resp.APIVersion != credentialProviderAPIVersion || resp.Kind != "CredentialProviderResponse" {
		return nil, fmt.Errorf("its response has apiVersion %q kind %q, want %s CredentialProviderResponse", resp.APIVersion, resp.Kind, credentialProviderAPIVersion)
	}
	switch resp.CacheKeyType {
	case credentialproviderv1.ImagePluginCacheKeyType, credentialproviderv1.RegistryPluginCacheKeyType, credentialproviderv1.GlobalPluginCacheKeyType:
	default:
		return nil, fmt.Errorf("its response has cacheKeyType %q, want Image, Registry or Global", resp.CacheKeyType)
	}
	return &resp, nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
