package cri

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"path"
	"sort"
	"strings"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// dockerAuth is one entry of a docker config file (.dockerconfigjson's
// "auths" or a .dockercfg).
type dockerAuth struct {
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	Auth          string `json:"auth,omitempty"`
	Email         string `json:"email,omitempty"`
	ServerAddress string `json:"serveraddress,omitempty"`
	IdentityToken string `json:"identitytoken,omitempty"`
	RegistryToken string `json:"registrytoken,omitempty"`
}

// keyEntry is one registry key of a pull secret and its credentials.
type keyEntry struct {
	key  string // as written in the secret
	host string // host[:port], lower case
	path string // repository path prefix, no leading or trailing slash
	auth *runtimeapi.AuthConfig
}

// keyring holds the credentials of a pod's pull secrets (kubelet: the
// docker keyring of its imagePullSecrets).
type keyring struct{ entries []keyEntry }

// newKeyring reads the kubernetes.io/dockerconfigjson and
// kubernetes.io/dockercfg secrets among secrets; other types are skipped.
// An error names the secret, never its data.
func newKeyring(secrets []corev1.Secret) (*keyring, error) {
	kr := &keyring{}
	for i := range secrets {
		s := &secrets[i]
		auths, err := secretAuths(s)
		if err != nil {
			return nil, fmt.Errorf("image pull secret %s/%s: %w", s.Namespace, s.Name, err)
		}
		for key, a := range auths {
			e, err := newKeyEntry(key, a)
			if err != nil {
				continue // a key that names no registry matches no image
			}
			kr.entries = append(kr.entries, e)
		}
	}
	kr.sort()
	return kr, nil
}

// sort puts the most specific key first, as the kubelet's keyring orders
// them; between entries of the same key the earlier first.
func (kr *keyring) sort() {
	sort.SliceStable(kr.entries, func(i, j int) bool {
		return kr.entries[i].host+"/"+kr.entries[i].path > kr.entries[j].host+"/"+kr.entries[j].path
	})
}

// secretAuths decodes a pull secret's registry entries.
func secretAuths(s *corev1.Secret) (map[string]dockerAuth, error) {
	switch s.Type {
	case corev1.SecretTypeDockerConfigJson:
		var cfg struct {
			Auths map[string]dockerAuth `json:"auths"`
		}
		if err := json.Unmarshal(s.Data[corev1.DockerConfigJsonKey], &cfg); err != nil {
			return nil, fmt.Errorf("%s is not a docker config: %s", corev1.DockerConfigJsonKey, jsonErrorKind(err))
		}
		return cfg.Auths, nil
	case corev1.SecretTypeDockercfg:
		var cfg map[string]dockerAuth
		if err := json.Unmarshal(s.Data[corev1.DockerConfigKey], &cfg); err != nil {
			return nil, fmt.Errorf("%s is not a docker config: %s", corev1.DockerConfigKey, jsonErrorKind(err))
		}
		return cfg, nil
	}
	return nil, nil
}

// jsonErrorKind says what is wrong with a secret's JSON without quoting
// any of it (a syntax error's message may carry the secret's bytes).
func jsonErrorKind(err error) string {
	switch err.(type) {
	case *json.SyntaxError:
		return "invalid JSON"
	case *json.UnmarshalTypeError:
		return "a field has the wrong type"
	}
	return "cannot be decoded"
}

// newKeyEntry parses a registry key ("registry.example:5000/team",
// "https://index.docker.io/v1/", "*.example.com") and its credentials.
func newKeyEntry(key string, a dockerAuth) (keyEntry, error) {
	raw := key
	if !strings.Contains(raw, "://") {
		raw = "https://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return keyEntry{}, fmt.Errorf("registry key %q names no host", key)
	}
	host := strings.ToLower(u.Host)
	// "/v1/" and "/v2/" name the registry itself, as in the docker client.
	p := strings.Trim(strings.TrimPrefix(strings.TrimPrefix(u.Path, "/v1/"), "/v2/"), "/")
	if p == "v1" || p == "v2" {
		p = ""
	}
	// Docker Hub's legacy key and its hosts name docker.io.
	switch host {
	case "index.docker.io", "registry-1.docker.io":
		host = "docker.io"
	}
	if a.Auth != "" && a.Username == "" && a.Password == "" {
		if dec, err := base64.StdEncoding.DecodeString(a.Auth); err == nil {
			if user, pass, ok := strings.Cut(string(dec), ":"); ok {
				a.Username, a.Password = user, pass
			}
		}
	}
	// only the user and password go to the runtime, as from the kubelet
	// (a server address would have to be a URL to containerd).
	return keyEntry{key: key, host: host, path: p, auth: &runtimeapi.AuthConfig{Username: a.Username, Password: a.Password}}, nil
}

// lookup returns the credentials whose keys match the image, the most
// specific first; none for an image no key matches.
func (kr *keyring) lookup(image string) []*runtimeapi.AuthConfig {
	if kr == nil || len(kr.entries) == 0 {
		return nil
	}
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return nil
	}
	host, p := strings.ToLower(reference.Domain(named)), reference.Path(named)
	var out []*runtimeapi.AuthConfig
	for _, e := range kr.entries {
		if hostMatches(e.host, host) && pathMatches(e.path, p) {
			out = append(out, e.auth)
		}
	}
	return out
}

// hostMatches: the same port, and each DNS label equal or matched by a
// glob of the key ("*.example.com" matches "a.example.com", not
// "a.b.example.com").
func hostMatches(key, host string) bool {
	kh, kp := splitPort(key)
	hh, hp := splitPort(host)
	if kp != hp {
		return false
	}
	kl, hl := strings.Split(kh, "."), strings.Split(hh, ".")
	if len(kl) != len(hl) {
		return false
	}
	for i := range kl {
		if ok, err := path.Match(kl[i], hl[i]); err != nil || !ok {
			return false
		}
	}
	return true
}

func splitPort(hostport string) (host, port string) {
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		return h, p
	}
	return hostport, ""
}

// pathMatches: the key's path is empty or a prefix of the repository's
// path at a component boundary.
func pathMatches(key, repo string) bool {
	return key == "" || repo == key || strings.HasPrefix(repo, key+"/")
}
