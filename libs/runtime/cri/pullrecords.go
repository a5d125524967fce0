package cri

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/splitlet/splitlet/libs/atomicfile"
)

// pullRecords remembers which credentials pulled each image, so that an
// image pulled with a pod's credentials does not run for a pod without them
// (kubelet: KubeletEnsureSecretPulledImages with its default policy,
// NeverVerifyPreloadedImages). The records are files under dir, kept
// across restarts: pulling/<hash of the image name> while a pull is under
// way, pulled/<hash of the image ID> once it is done. An image with no
// record was there before (preloaded) and runs for every pod.
type pullRecords struct {
	dir string
	mu  sync.Mutex
}

// pulledRecord is what pulled/<id> holds.
type pulledRecord struct {
	ImageRef string `json:"imageRef"`
	// NodeWide: an anonymous pull got the image; every pod may run it.
	NodeWide bool `json:"nodeWide,omitempty"`
	// Credentials are the hashes of the credentials that pulled it.
	Credentials []string `json:"credentials,omitempty"`
}

func fileKey(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// credentialHash identifies a credential without holding it (as the
// kubelet's pull records do).
func credentialHash(a *runtimeapi.AuthConfig) string {
	data, _ := json.Marshal([]string{a.GetServerAddress(), a.GetUsername(), a.GetPassword(), a.GetAuth(), a.GetIdentityToken(), a.GetRegistryToken()})
	return fileKey(string(data))
}

func (p *pullRecords) intentPath(image string) string {
	return filepath.Join(p.dir, "pulling", fileKey(image))
}

func (p *pullRecords) pulledPath(ref string) string {
	return filepath.Join(p.dir, "pulled", fileKey(ref))
}

// mustPull says whether a pod with the credentials auths must pull image
// (present as ref) before it may run it: a pull of it was cut short, or it
// was pulled only with credentials the pod does not have.
func (p *pullRecords) mustPull(image, ref string, auths func() []*runtimeapi.AuthConfig) (bool, error) {
	if p == nil {
		return false, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := os.Stat(p.intentPath(image)); err == nil {
		return true, nil
	}
	rec, err := p.read(ref)
	if err != nil || rec == nil || rec.NodeWide {
		return false, err
	}
	for _, a := range auths() {
		if slices.Contains(rec.Credentials, credentialHash(a)) {
			return false, nil
		}
	}
	return true, nil
}

// intend writes the intent of a pull of image before it starts.
func (p *pullRecords) intend(image string) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return atomicfile.Write(p.intentPath(image), []byte(image))
}

// done records what pulled image as ref (auth nil: an anonymous pull),
// then drops the intent; failed (ref empty) drops the intent alone, as
// the image did not change.
func (p *pullRecords) done(image, ref string, auth *runtimeapi.AuthConfig) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if ref != "" {
		rec, err := p.read(ref)
		if err != nil {
			return err
		}
		if rec == nil {
			rec = &pulledRecord{ImageRef: ref}
		}
		if auth == nil {
			rec.NodeWide = true
		} else if h := credentialHash(auth); !slices.Contains(rec.Credentials, h) {
			rec.Credentials = append(rec.Credentials, h)
		}
		data, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		if err := atomicfile.Write(p.pulledPath(ref), data); err != nil {
			return err
		}
	}
	if err := os.Remove(p.intentPath(image)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (p *pullRecords) read(ref string) (*pulledRecord, error) {
	data, err := os.ReadFile(p.pulledPath(ref))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rec pulledRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("image pull record of %s: %w", ref, err)
	}
	return &rec, nil
}
