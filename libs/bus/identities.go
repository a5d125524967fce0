package bus

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nkeys"
)

// AdminIdentity is the bus identity that makes the node's streams and the
// lease bucket (splitlet bus init); the stages' identities are their names.
const AdminIdentity = "admin"

// Identities are the bus identities of a node: the admin's, each stage's
// and each shadow's.
func Identities() []string { return append([]string{AdminIdentity}, StageIdentities()...) }

// EnsureSeed returns the public key of the NATS user nkey seed in path,
// making the seed (mode 0600) when there is none. A seed once made is kept,
// so that the identity survives restarts of whatever made it.
func EnsureSeed(path string) (string, error) {
	seed, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return "", err
		}
		if seed, err = kp.Seed(); err != nil {
			return "", err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return "", err
		}
		if err := os.WriteFile(path, seed, 0o600); err != nil {
			return "", err
		}
	} else if err != nil {
		return "", err
	}
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		return "", fmt.Errorf("%s: not an nkey seed: %w", path, err)
	}
	return kp.PublicKey()
}

// WriteIdentities makes (or keeps) a seed per identity, at seedPath(id),
// and returns nats-server's authorization block for them, for a node
// (AuthorizationConfig).
func WriteIdentities(node string, seedPath func(id string) string) (string, error) {
	keys := map[string]string{}
	for _, id := range Identities() {
		pub, err := EnsureSeed(seedPath(id))
		if err != nil {
			return "", fmt.Errorf("%s: %w", id, err)
		}
		keys[id] = pub
	}
	return AuthorizationConfig(node, keys)
}
