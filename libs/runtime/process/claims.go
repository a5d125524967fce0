package process

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// User claims: each pod runs as a uid of its own, and no two pods of the
// host may share one (they would read each other's files, environment and
// signal each other). A uid is claimed for a pod by a file named after it
// in the claims directory, which every runtime of the host shares (every
// node, every replica): the file is made by link(2), which fails when the
// name exists, so two runtimes cannot claim the same uid, and it holds the
// pod's UID, so that the runtime that runs the pod next (a restarted
// replica, one that took the pod over, after a kill -9 alike) finds the
// pod's uid again and the pod's files, owned by it, stay its own. The
// claim goes when the pod's files are gone (ReleasePodUser); a pod never
// removed on this host (its node gone for good) keeps its claim.
//
// A pod's first uid is the range's first plus a hash of its UID, then the
// next free one: a pod claimed again after a release tends to get the same.

// UserRange is a range of uids, and the gids of the same numbers.
type UserRange struct {
	First, Count uint32
}

// DefaultUserRange is 65536 uids from 0x70000000 (1879048192), above what
// systemd and useradd hand out (system, regular and dynamic users below
// 65536, subordinate ranges from 100000 up to 600100000, systemd-nspawn's
// container ranges up to 1879048191) and below 2^31, which some tools take
// as negative.
var DefaultUserRange = UserRange{First: 0x70000000, Count: 65536}

// Last is the range's last uid.
func (r UserRange) Last() uint32 { return r.First + r.Count - 1 }

func (r UserRange) String() string {
	return strconv.FormatUint(uint64(r.First), 10) + "-" + strconv.FormatUint(uint64(r.Last()), 10)
}

// ParseUserRange reads "first-last" (inclusive). The range may not hold 0
// (root) nor 65534 (nobody, which processes of the host run as) nor
// 4294967295 (no uid).
func ParseUserRange(s string) (UserRange, error) {
	a, b, ok := strings.Cut(s, "-")
	first, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	last, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 32)
	switch {
	case !ok || err1 != nil || err2 != nil:
		return UserRange{}, errors.New("want first-last, two uids")
	case last < first:
		return UserRange{}, errors.New("the last uid is below the first")
	case first == 0:
		return UserRange{}, errors.New("the range holds uid 0 (root)")
	case first <= 65534 && 65534 <= last:
		return UserRange{}, errors.New("the range holds uid 65534 (nobody)")
	case last == 1<<32-1:
		return UserRange{}, errors.New("the range holds uid 4294967295, which is no uid")
	}
	return UserRange{First: uint32(first), Count: uint32(last - first + 1)}, nil
}

// claims are the uid claims of the host, in dir.
type claims struct {
	dir string
	rng UserRange

	mu sync.Mutex
	// byPod caches pods' claims; each use checks the file still says so.
	byPod map[types.UID]uint32
}

// claim is what a claim file holds.
type claim struct {
	Pod       types.UID `json:"pod"`
	Namespace string    `json:"namespace,omitempty"`
	Name      string    `json:"name,omitempty"`
}

func newClaims(dir string, rng UserRange) (*claims, error) {
	dir, err := openRecordDir(dir)
	if err != nil {
		return nil, err
	}
	// a claim half made by a runtime that died then.
	if tmps, _ := filepath.Glob(filepath.Join(dir, ".claim-*")); len(tmps) > 0 {
		for _, t := range tmps {
			if fi, err := os.Lstat(t); err == nil && time.Since(fi.ModTime()) > time.Minute {
				_ = os.Remove(t)
			}
		}
	}
	return &claims{dir: dir, rng: rng, byPod: map[types.UID]uint32{}}, nil
}

func (c *claims) path(n uint32) string {
	return filepath.Join(c.dir, strconv.FormatUint(uint64(n), 10))
}

// holder is the pod the claim on n names ("" for none).
func (c *claims) holder(n uint32) types.UID {
	b, err := os.ReadFile(c.path(n))
	if err != nil {
		return ""
	}
	var cl claim
	if json.Unmarshal(b, &cl) != nil {
		return ""
	}
	return cl.Pod
}

// Claim returns the pod's uid: the one claimed for it already, on this
// host, by any runtime, else a free one, claimed now.
func (c *claims) Claim(pod types.UID, namespace, name string) (uint32, error) {
	if pod == "" {
		return 0, errors.New("a pod without a UID has no user")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.byPod[pod]; ok && c.holder(n) == pod {
		return n, nil
	}
	delete(c.byPod, pod)
	if n, ok := c.find(pod); ok {
		c.byPod[pod] = n
		return n, nil
	}
	n, err := c.take(claim{Pod: pod, Namespace: namespace, Name: name})
	if err != nil {
		return 0, err
	}
	c.byPod[pod] = n
	return n, nil
}

// find looks the pod's claim up among all of them.
func (c *claims) find(pod types.UID) (uint32, bool) {
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return 0, false
	}
	for _, e := range entries {
		v, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil || uint32(v) < c.rng.First || uint32(v) > c.rng.Last() {
			continue
		}
		if c.holder(uint32(v)) == pod {
			return uint32(v), true
		}
	}
	return 0, false
}

// take claims the first free uid from the pod's hash on.
func (c *claims) take(cl claim) (uint32, error) {
	data, _ := json.Marshal(cl)
	var b [8]byte
	_, _ = rand.Read(b[:])
	tmp := filepath.Join(c.dir, ".claim-"+hex.EncodeToString(b[:]))
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return 0, fmt.Errorf("claiming a uid: %w", err)
	}
	defer os.Remove(tmp)
	h := fnv.New32a()
	_, _ = h.Write([]byte(cl.Pod))
	start := h.Sum32() % c.rng.Count
	for i := uint32(0); i < c.rng.Count; i++ {
		n := c.rng.First + (start+i)%c.rng.Count
		err := os.Link(tmp, c.path(n))
		if err == nil {
			return n, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return 0, fmt.Errorf("claiming a uid: %w", err)
		}
	}
	return 0, fmt.Errorf("no free uid in %s: every one is claimed (claims in %s)", c.rng, c.dir)
}

// Release drops the pod's claim, if it has one.
func (c *claims) Release(pod types.UID) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.byPod[pod]
	if !ok || c.holder(n) != pod {
		if n, ok = c.find(pod); !ok {
			return nil
		}
	}
	delete(c.byPod, pod)
	if err := os.Remove(c.path(n)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("releasing uid %d: %w", n, err)
	}
	return nil
}

// ReleasePodUser implements runtime.PodUsers: the pod's uid is free again.
// The pod's files must be gone (its runtime files, RemovePod, and its
// volumes), or the next pod given the uid would read them.
func (r *Runtime) ReleasePodUser(uid types.UID) error {
	if r.users == nil {
		return nil
	}
	return r.users.Release(uid)
}
