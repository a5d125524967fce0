// Package ownership shares a node's partitions among pod worker replicas
// with leases in a JetStream key-value bucket.
//
// Keys of the bucket splitlet_v1_<node>_owners:
//
//	replica.<id>     a live replica; the value is "<id> <heartbeat unix ms>"
//	partition.<p>    the owner of partition p: "<id> <written unix ms>"
//
// Every replica heartbeats its own key each refresh period, and that one
// write keeps every lease naming it alive: a lease's time is the later of
// its own key's and its owner's heartbeat. A partition key is written when
// it is taken and rewritten (compare-and-set on its revision) once every
// rewrite period (a minute), so that the bucket's max age never drops it;
// an idle node writes one key a second per replica, not one per partition.
//
// Who should own a partition is a pure function of the set of live replicas,
// rendezvous (highest random weight) hashing: each live replica scores
// hash(replica, partition) and the highest score wins. Every replica
// computes the same answer with no coordination, and when a replica joins or
// leaves only the partitions it gains or loses change owner (a move restarts
// nothing: the pods outlive their worker, but a move still costs a
// hand-over).
//
// Invariants:
//   - A lease is taken only when its key is absent (create) or its time is
//     older than the TTL (update on the stale revision): exactly one
//     contender wins. A lease that names this replica (its previous
//     incarnation's, after a restart with the same id) is resumed at once.
//   - Fencing: the owner stops acting on a partition (its Release hook runs
//     with lost set) once the later of its last successful heartbeat and its
//     last write of the lease is older than the fence deadline, TTL minus a
//     margin (the larger of one refresh period and a quarter of the TTL), so
//     it has stopped before any other replica may take the lease; and at
//     once when the watch shows the key written by another replica after
//     this one's write.
//   - A rewrite that fails on the revision (a reply lost to a NATS restart:
//     "wrong last sequence", "key revision mismatch") re-reads the key: if
//     it still names this replica the lease is claimed again on the revision
//     read, and nothing is released; a newer revision that still names this
//     replica, seen on the watch, is adopted without a write.
//   - A voluntary release (the partition now belongs to another live
//     replica, or shutdown) keeps the replica heartbeated while the Release
//     hook runs (the hand-over), then deletes the key on its revision, so
//     the next owner takes it at once and never before the hand-over ended.
//   - Replica ids are unique among live replicas: a replica that starts
//     with the id of one that still heartbeats takes a suffixed id
//     (ClaimID); one whose previous incarnation died resumes its id (and its
//     leases) as soon as that incarnation's heartbeat has stopped.
//   - Lease ages are judged by the reader's clock against the writer's
//     timestamp: replicas' clocks must agree to well within the fence margin.
package ownership

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/splitlet/splitlet/libs/periodic"
)

// Defaults: a dead replica's partitions move within TTL + one period.
const (
	DefaultRefresh = time.Second
	DefaultTTL     = 6 * time.Second
	// DefaultRewrite is how often an owner rewrites its partition keys:
	// well within the bucket's max age (bucketMaxAge).
	DefaultRewrite = time.Minute
)

// bucketMaxAge: keys of replicas that died are garbage-collected after it.
const bucketMaxAge = 10 * time.Minute

// MinTTLRefreshes is how many refresh periods a TTL must span at least: the
// fence deadline (TTL minus at least one period) must leave the owner a
// period's room to renew.
const MinTTLRefreshes = 3

// BucketName is the owners bucket of a node token.
func BucketName(nodeToken string) string { return "splitlet_v1_" + nodeToken + "_owners" }

// Hooks are called when this replica gains or loses a partition. Acquire
// runs before the lease is announced as usable; an error gives the lease
// back. Release must stop all work on the partition before it returns; lost
// says the lease is no longer this replica's (another may hold it soon), so
// nothing more may be said for the partition.
type Hooks struct {
	Acquire func(ctx context.Context, p int) error
	Release func(ctx context.Context, p int, lost bool)
	// Changed is called after any change of the ownership view.
	Changed func()
}

// Options of a Manager.
type Options struct {
	KV         jetstream.KeyValue
	ID         string
	Partitions int
	Refresh    time.Duration
	TTL        time.Duration
	// Rewrite is how often the partition keys owned are rewritten.
	Rewrite time.Duration
	Hooks   Hooks
	Log     *zap.Logger
	Now     func() time.Time
}

type lease struct {
	owner string
	at    time.Time
	rev   uint64
}

// Manager runs one replica's side of the leases.
type Manager struct {
	o Options
	// fenceAfter: a lease not renewed for this long is given up.
	fenceAfter time.Duration

	mu   sync.Mutex
	view map[string]lease // every key of the bucket, as last read
	// owned: partition -> revision of our lease; renewed: the time written
	// by its last successful write. beat: the time written by the last
	// successful heartbeat of this replica's key; rewritten: when the owned
	// keys were last rewritten.
	owned     map[int]uint64
	renewed   map[int]time.Time
	beat      time.Time
	rewritten time.Time
	busy      map[int]bool // acquire or release in progress
	// taking: an acquire whose lease is claimed and whose Acquire hook has
	// not returned; such a partition is held but not yet reported
	// as owned (OwnedList), since its work has not started.
	taking map[int]bool
}

// CreateBucket creates (or opens) the owners bucket, with the given
// replicas (nats-replicas: 3 on a three-server cluster).
func CreateBucket(ctx context.Context, js jetstream.JetStream, nodeToken string, replicas int) (jetstream.KeyValue, error) {
	// A bucket made beforehand (`splitlet bus init`) is used as it is: a
	// replica's identity may not manage streams.
	if kv, err := js.KeyValue(ctx, BucketName(nodeToken)); err == nil {
		return kv, nil
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Replicas:    max(replicas, 1),
		Bucket:      BucketName(nodeToken),
		Description: "Splitlet pod worker partition leases",
		History:     1,
		TTL:         bucketMaxAge,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("owners bucket: %w", err)
	}
	return kv, nil
}

// FenceMargin is how long before the TTL an owner that could not renew a
// lease stops acting on its partition.
func FenceMargin(refresh, ttl time.Duration) time.Duration {
	return max(refresh, ttl/4)
}

// New returns a manager.
func New(o Options) *Manager {
	if o.Refresh <= 0 {
		o.Refresh = DefaultRefresh
	}
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.Rewrite <= 0 {
		o.Rewrite = DefaultRewrite
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Manager{o: o, fenceAfter: o.TTL - FenceMargin(o.Refresh, o.TTL),
		view: map[string]lease{}, owned: map[int]uint64{}, renewed: map[int]time.Time{}, busy: map[int]bool{}, taking: map[int]bool{}}
}

func partKey(p int) string        { return "partition." + strconv.Itoa(p) }
func replicaKey(id string) string { return "replica." + id }

// stamp is a heartbeat value of this replica and the time it carries.
func (m *Manager) stamp() (time.Time, []byte) {
	now := time.UnixMilli(m.o.Now().UnixMilli())
	return now, []byte(m.o.ID + " " + strconv.FormatInt(now.UnixMilli(), 10))
}

func parse(v []byte) (owner string, at time.Time) {
	s := string(v)
	i := strings.LastIndexByte(s, ' ')
	if i < 0 {
		return s, time.Time{}
	}
	ms, err := strconv.ParseInt(s[i+1:], 10, 64)
	if err != nil {
		return s[:i], time.Time{}
	}
	return s[:i], time.UnixMilli(ms)
}

// ValidID says whether id can name a replica (a key token of the bucket).
func ValidID(id string) error {
	if id == "" {
		return errors.New("empty")
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("%q: only letters, digits, '-', '_' and '.'", id)
		}
	}
	if strings.HasPrefix(id, ".") || strings.HasSuffix(id, ".") || strings.Contains(id, "..") {
		return fmt.Errorf("%q: empty token between dots", id)
	}
	return nil
}

// ClaimID returns the id this replica may use: id itself, unless a live
// replica already heartbeats under it (a second replica given the same id,
// as replicas that share a host name are by default), or another replica
// claims it at the same moment; then id with a random suffix. The claim is
// a compare-and-set on the replica's key. A previous incarnation of this
// replica that died (kill -9) holds the id only until its heartbeat has
// stopped for two and a half refresh periods, so a restart resumes its id,
// and its leases, well within the TTL. The claimed id is heartbeated from
// then on, until stop is called (once the Manager heartbeats it).
func ClaimID(ctx context.Context, kv jetstream.KeyValue, id string, refresh, ttl time.Duration, log *zap.Logger) (claimed string, stop func(), err error) {
	claimed, err = claimID(ctx, kv, id, refresh, ttl, log)
	if err != nil {
		return "", func() {}, err
	}
	hctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		periodic.Run(hctx, refresh, func(ctx context.Context) {
			pctx, pcancel := context.WithTimeout(ctx, refresh)
			_, _ = kv.Put(pctx, replicaKey(claimed), []byte(claimed+" "+strconv.FormatInt(time.Now().UnixMilli(), 10)))
			pcancel()
		})
	}()
	return claimed, func() { cancel(); <-done }, nil
}

func claimID(ctx context.Context, kv jetstream.KeyValue, id string, refresh, ttl time.Duration, log *zap.Logger) (string, error) {
	key := replicaKey(id)
	value := func() []byte { return []byte(id + " " + strconv.FormatInt(time.Now().UnixMilli(), 10)) }
	taken := func() string {
		b := make([]byte, 3)
		_, _ = rand.Read(b)
		other := id + "-" + hex.EncodeToString(b)
		_, _ = kv.Put(ctx, replicaKey(other), []byte(other+" "+strconv.FormatInt(time.Now().UnixMilli(), 10)))
		log.Warn("another live pod worker replica has this replica id; taking another", zap.String("id", id), zap.String("taken", other))
		return other
	}
claim:
	for {
		_, err := kv.Create(ctx, key, value())
		if err == nil {
			return id, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return "", fmt.Errorf("owners bucket: claim %s: %w", key, err)
		}
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // deleted meanwhile: create again
		}
		if err != nil {
			return "", fmt.Errorf("owners bucket: read %s: %w", key, err)
		}
		_, at := parse(e.Value())
		// a live replica heartbeats every period: silence for two and a
		// half means the holder is gone.
		quiet := at.Add(2*refresh + refresh/2)
		for now := time.Now(); now.Sub(at) < ttl && now.Before(quiet); now = time.Now() {
			t := time.NewTimer(min(time.Until(quiet), refresh/2))
			select {
			case <-ctx.Done():
				t.Stop()
				return "", ctx.Err()
			case <-t.C:
			}
			again, err := kv.Get(ctx, key)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue claim // the holder shut down
			}
			if err != nil {
				return "", fmt.Errorf("owners bucket: read %s: %w", key, err)
			}
			if again.Revision() != e.Revision() {
				return taken(), nil // it heartbeats, or another claimed it
			}
		}
		if _, err := kv.Update(ctx, key, value(), e.Revision()); err != nil {
			return taken(), nil // claimed by another at the same moment
		}
		return id, nil
	}
}

// Run keeps the leases until ctx ends, then releases every partition and
// deletes this replica's key so that others take over at once.
func (m *Manager) Run(ctx context.Context) {
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	changes := make(chan struct{}, 1)
	go m.watch(watchCtx, changes)
	refreshDone := make(chan struct{})
	refreshCtx, stopRefresh := context.WithCancel(context.Background())
	go func() {
		defer close(refreshDone)
		m.refreshLoop(refreshCtx)
	}()
	t := time.NewTicker(m.o.Refresh)
	defer t.Stop()
	// the fence is checked often enough to act well before the TTL.
	fence := time.NewTicker(max(m.o.Refresh/4, time.Millisecond))
	defer fence.Stop()
	for {
		m.balance(ctx)
		select {
		case <-ctx.Done():
			m.shutdown()
			stopRefresh()
			<-refreshDone
			return
		case <-t.C:
		case <-changes:
		case <-fence.C:
			m.fence()
			continue
		}
	}
}

func (m *Manager) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// release what is owned; an acquire under way (its context is done, so
	// it ends soon) may still add a partition: go round until none is left.
	for ctx.Err() == nil {
		m.mu.Lock()
		var parts []int
		for p := range m.owned {
			if !m.busy[p] {
				m.busy[p] = true
				parts = append(parts, p)
			}
		}
		left := len(m.owned) + len(m.busy)
		m.mu.Unlock()
		if left == 0 {
			break
		}
		var wg sync.WaitGroup
		for _, p := range parts {
			wg.Add(1)
			go func(p int) { defer wg.Done(); m.release(ctx, p) }(p)
		}
		wg.Wait()
		if len(parts) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	_ = m.o.KV.Delete(ctx, replicaKey(m.o.ID))
}

// watch keeps the view of the bucket current.
func (m *Manager) watch(ctx context.Context, changes chan<- struct{}) {
	for ctx.Err() == nil {
		w, err := m.o.KV.WatchAll(ctx)
		if err != nil {
			m.o.Log.Warn("cannot watch the owners bucket, retrying", zap.Error(err))
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		for ctx.Err() == nil {
			var e jetstream.KeyValueEntry
			var ok bool
			select {
			case <-ctx.Done():
			case e, ok = <-w.Updates():
			}
			if ctx.Err() != nil || !ok {
				break
			}
			if e == nil {
				continue // end of the initial values
			}
			m.mu.Lock()
			if e.Operation() == jetstream.KeyValuePut {
				owner, at := parse(e.Value())
				m.view[e.Key()] = lease{owner: owner, at: at, rev: e.Revision()}
			} else {
				delete(m.view, e.Key())
			}
			m.mu.Unlock()
			select {
			case changes <- struct{}{}:
			default:
			}
		}
		_ = w.Stop()
	}
}

// refreshLoop heartbeats this replica and its leases.
func (m *Manager) refreshLoop(ctx context.Context) {
	wait.NonSlidingUntilWithContext(ctx, m.refresh, m.o.Refresh)
}

// refresh heartbeats once, and rewrites the owned keys when a rewrite
// period has passed; a round never outlasts a refresh period (a NATS that
// does not answer must not hold the next round back).
func (m *Manager) refresh(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, m.o.Refresh)
	defer cancel()
	at, val := m.stamp()
	_, err := m.o.KV.Put(ctx, replicaKey(m.o.ID), val)
	if err != nil && ctx.Err() == nil {
		m.o.Log.Warn("cannot heartbeat replica key", zap.Error(err))
	}
	m.mu.Lock()
	if err == nil {
		m.beat = at
	}
	due := at.Sub(m.rewritten) >= m.o.Rewrite
	if due {
		m.rewritten = at
	}
	m.mu.Unlock()
	if due {
		m.rewrite(ctx)
	}
}

// rewrite writes every owned partition key again (compare-and-set), so that
// the bucket's max age never drops a lease that is held.
func (m *Manager) rewrite(ctx context.Context) {
	m.mu.Lock()
	owned := make(map[int]uint64, len(m.owned))
	for p, rev := range m.owned {
		owned[p] = rev
	}
	m.mu.Unlock()
	for p, rev := range owned {
		if ctx.Err() != nil {
			return
		}
		at, val := m.stamp()
		nrev, err := m.o.KV.Update(ctx, partKey(p), val, rev)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			nrev, at, err = m.reclaim(ctx, p, err)
		}
		if err == nil {
			m.mu.Lock()
			if m.owned[p] == rev {
				m.owned[p], m.renewed[p] = nrev, at
			}
			m.mu.Unlock()
		}
	}
}

// errTaken: the lease names another replica.
var errTaken = errors.New("lease taken by another replica")

// errReleased: the lease was given up while its heartbeat was in flight.
var errReleased = errors.New("lease released by this replica")

// reclaim handles a failed heartbeat of p's lease: the key is read again,
// and a lease that still names this replica is claimed again on the
// revision read (the revision we had was lost, as when a NATS server
// restarted with a reply in flight); one that names another replica is
// lost at once (fencing).
func (m *Manager) reclaim(ctx context.Context, p int, cause error) (uint64, time.Time, error) {
	e, err := m.o.KV.Get(ctx, partKey(p))
	at, val := m.stamp()
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		// gone (never by another's hand: a taker writes its own name). A
		// release deletes the key only after dropping p from owned, so a
		// heartbeat that raced a release finds p no longer ours here and
		// must not bring the lease back: nobody would renew or free it.
		m.mu.Lock()
		_, still := m.owned[p]
		m.mu.Unlock()
		if !still {
			return 0, at, errReleased
		}
		rev, err := m.o.KV.Create(ctx, partKey(p), val)
		if err == nil {
			m.o.Log.Info("partition lease claimed again", zap.Int("partition", p), zap.NamedError("after", cause))
		}
		return rev, at, err
	case err != nil:
		m.o.Log.Warn("cannot heartbeat partition lease", zap.Int("partition", p), zap.Error(cause), zap.NamedError("reread", err))
		return 0, at, err
	}
	if owner, _ := parse(e.Value()); owner != m.o.ID {
		m.o.Log.Warn("partition lease lost", zap.Int("partition", p), zap.String("owner", owner), zap.Error(cause))
		m.lose(p, "lease taken by "+owner)
		return 0, at, errTaken
	}
	rev, err := m.o.KV.Update(ctx, partKey(p), val, e.Revision())
	if err == nil {
		m.o.Log.Info("partition lease claimed again", zap.Int("partition", p), zap.NamedError("after", cause))
	}
	return rev, at, err
}

// lose stops work on a partition whose lease is no longer (surely) ours.
func (m *Manager) lose(p int, why string) {
	m.mu.Lock()
	if _, still := m.owned[p]; !still || m.busy[p] {
		m.mu.Unlock()
		return
	}
	delete(m.owned, p)
	delete(m.renewed, p)
	m.busy[p] = true
	m.mu.Unlock()
	m.o.Log.Warn("stopping work on partition", zap.Int("partition", p), zap.String("reason", why))
	go func() {
		m.o.Hooks.Release(context.Background(), p, true)
		m.mu.Lock()
		delete(m.busy, p)
		m.mu.Unlock()
		m.changed()
	}()
}

// fence gives up the partitions whose lease could not be renewed in time:
// neither this replica's heartbeat nor the lease's own key was written
// within the fence deadline.
func (m *Manager) fence() {
	now := m.o.Now()
	m.mu.Lock()
	var late []int
	for p := range m.owned {
		if at, ok := m.renewed[p]; ok && !m.busy[p] && now.Sub(latest(at, m.beat)) >= m.fenceAfter {
			late = append(late, p)
		}
	}
	m.mu.Unlock()
	for _, p := range late {
		m.lose(p, fmt.Sprintf("lease not renewed for %v", m.fenceAfter))
	}
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// leaseAtLocked is the time of a partition lease: the later of its key's
// own time and its owner's last heartbeat.
func (m *Manager) leaseAtLocked(l lease) time.Time {
	if r, ok := m.view[replicaKey(l.owner)]; ok && r.owner == l.owner {
		return latest(l.at, r.at)
	}
	return l.at
}

// checkHeldLocked compares the owned leases with the view: a key written by
// another replica after this one's write is lost (returned), and a newer
// revision that still names this replica (a retried write) is adopted.
func (m *Manager) checkHeldLocked() (taken map[int]string) {
	for p, rev := range m.owned {
		l, held := m.view[partKey(p)]
		if !held || l.rev <= rev || m.busy[p] {
			continue
		}
		if l.owner == m.o.ID {
			m.owned[p] = l.rev
			continue
		}
		if taken == nil {
			taken = map[int]string{}
		}
		taken[p] = l.owner
	}
	return taken
}

func (m *Manager) changed() {
	if m.o.Hooks.Changed != nil {
		m.o.Hooks.Changed()
	}
}

// live returns the replicas whose heartbeat is fresh, sorted.
func (m *Manager) liveLocked(now time.Time) []string {
	var out []string
	for k, l := range m.view {
		if id, ok := strings.CutPrefix(k, "replica."); ok && now.Sub(l.at) < m.o.TTL {
			out = append(out, id)
		}
	}
	if !slices.Contains(out, m.o.ID) {
		out = append(out, m.o.ID)
	}
	slices.Sort(out)
	return out
}

// weight is replica id's score for partition p (rendezvous hashing): FNV-1a
// of the id and the partition, through a 64-bit finalizer so that close
// inputs score far apart.
func weight(id string, p int) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(strconv.Itoa(p)))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Preferred is the replica that should own p: the live replica with the
// highest weight for p (ties, which need equal 64-bit scores, go to the
// smallest id). Every replica computes the same answer, and a replica
// joining or leaving moves only the partitions it wins or held.
func Preferred(p int, live []string) string {
	best, bestW := "", uint64(0)
	for _, id := range live {
		w := weight(id, p)
		if best == "" || w > bestW || (w == bestW && id < best) {
			best, bestW = id, w
		}
	}
	return best
}

// balance acquires the partitions this replica should own and that are
// free, releases those another live replica should own, and deletes leases
// of its own previous incarnation that it no longer wants.
func (m *Manager) balance(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	now := m.o.Now()
	m.mu.Lock()
	taken := m.checkHeldLocked()
	m.mu.Unlock()
	for p, owner := range taken {
		m.o.Log.Warn("partition lease lost", zap.Int("partition", p), zap.String("owner", owner))
		m.lose(p, "lease taken by "+owner)
	}
	m.mu.Lock()
	live := m.liveLocked(now)
	type claim struct {
		p   int
		rev uint64
	}
	var take, stale []claim
	var give []int
	for p := 0; p < m.o.Partitions; p++ {
		if m.busy[p] {
			continue
		}
		want := Preferred(p, live) == m.o.ID
		_, mine := m.owned[p]
		l, held := m.view[partKey(p)]
		dead := !held || now.Sub(m.leaseAtLocked(l)) >= m.o.TTL
		switch {
		case mine && !want:
			give = append(give, p)
		case !mine && want && (dead || l.owner == m.o.ID):
			rev := uint64(0)
			if held {
				rev = l.rev
			}
			take = append(take, claim{p, rev})
		case !mine && !want && held && l.owner == m.o.ID:
			// left by this replica's previous incarnation: let the
			// preferred owner have it now rather than after the TTL.
			stale = append(stale, claim{p, l.rev})
		}
	}
	for _, t := range take {
		m.busy[t.p], m.taking[t.p] = true, true
	}
	for _, p := range give {
		m.busy[p] = true
	}
	for _, s := range stale {
		m.busy[s.p] = true
	}
	m.mu.Unlock()
	for _, p := range give {
		go m.release(context.Background(), p)
	}
	for _, t := range take {
		go m.acquire(ctx, t.p, t.rev)
	}
	for _, s := range stale {
		go func(s claim) {
			dctx, cancel := context.WithTimeout(context.Background(), m.o.Refresh)
			defer cancel()
			_ = m.o.KV.Delete(dctx, partKey(s.p), jetstream.LastRevision(s.rev))
			m.mu.Lock()
			delete(m.busy, s.p)
			m.mu.Unlock()
			m.changed()
		}(s)
	}
}

func (m *Manager) acquire(ctx context.Context, p int, staleRev uint64) {
	defer func() {
		m.mu.Lock()
		delete(m.busy, p)
		delete(m.taking, p)
		m.mu.Unlock()
		m.changed()
	}()
	var rev uint64
	var err error
	at, val := m.stamp()
	if staleRev == 0 {
		rev, err = m.o.KV.Create(ctx, partKey(p), val)
	} else {
		rev, err = m.o.KV.Update(ctx, partKey(p), val, staleRev)
	}
	if err != nil {
		m.o.Log.Debug("partition lease not taken", zap.Int("partition", p), zap.Error(err))
		return
	}
	m.mu.Lock()
	m.owned[p], m.renewed[p] = rev, at
	m.mu.Unlock()
	if err := m.o.Hooks.Acquire(ctx, p); err != nil {
		m.o.Log.Warn("cannot take partition over, giving it back", zap.Int("partition", p), zap.Error(err))
		m.mu.Lock()
		rev, ok := m.owned[p]
		delete(m.owned, p)
		delete(m.renewed, p)
		m.mu.Unlock()
		m.o.Hooks.Release(context.Background(), p, !ok)
		if ok {
			m.deleteLease(context.Background(), p, rev)
		}
		return
	}
	m.o.Log.Info("partition acquired", zap.Int("partition", p))
}

func (m *Manager) release(ctx context.Context, p int) {
	defer func() {
		m.mu.Lock()
		delete(m.busy, p)
		m.mu.Unlock()
		m.changed()
	}()
	// the lease stays heartbeated while the partition is handed over.
	m.mu.Lock()
	_, held := m.owned[p]
	m.mu.Unlock()
	m.o.Hooks.Release(ctx, p, !held)
	m.mu.Lock()
	rev, ok := m.owned[p]
	delete(m.owned, p)
	delete(m.renewed, p)
	m.mu.Unlock()
	if ok {
		m.deleteLease(ctx, p, rev)
	}
	m.o.Log.Info("partition released", zap.Int("partition", p))
}

// deleteLease deletes our lease of p; a heartbeat in flight may have moved
// its revision, so on a mismatch it deletes the current one if still ours.
func (m *Manager) deleteLease(ctx context.Context, p int, rev uint64) {
	for range 3 {
		err := m.o.KV.Delete(ctx, partKey(p), jetstream.LastRevision(rev))
		if err == nil {
			return
		}
		e, gerr := m.o.KV.Get(ctx, partKey(p))
		if gerr != nil {
			return // gone already
		}
		if owner, _ := parse(e.Value()); owner != m.o.ID {
			return // someone else's now
		}
		rev = e.Revision()
	}
	m.o.Log.Warn("cannot delete partition lease (it will expire)", zap.Int("partition", p))
}

// Owned reports whether this replica owns p now.
func (m *Manager) Owned(p int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.owned[p]
	return ok
}

// OwnsAll reports whether this replica owns every partition now.
func (m *Manager) OwnsAll() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.owned) == m.o.Partitions
}

// OwnedList lists the partitions this replica owns and works on: a
// partition whose take-over is still under way is not listed.
func (m *Manager) OwnedList() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]int, 0, len(m.owned))
	for p := range m.owned {
		if !m.taking[p] {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// Status is the node-wide view: partitions with no live owner, and the
// live replicas.
func (m *Manager) Status() (unowned []int, replicas []string) {
	now := m.o.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	live := m.liveLocked(now)
	for p := 0; p < m.o.Partitions; p++ {
		if _, mine := m.owned[p]; mine && !m.busy[p] {
			continue
		}
		l, ok := m.view[partKey(p)]
		if !ok || now.Sub(m.leaseAtLocked(l)) >= m.o.TTL || !slices.Contains(live, l.owner) || (l.owner == m.o.ID && m.busy[p]) {
			unowned = append(unowned, p)
		}
	}
	return unowned, live
}
