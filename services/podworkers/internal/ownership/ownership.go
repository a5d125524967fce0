// Package ownership shares a node's partitions among pod worker replicas
// with leases in a JetStream key-value bucket.
//
// Keys of the bucket splitlet_v1_<node>_owners:
//
//	replica.<id>     a live replica; the value is its heartbeat time
//	partition.<p>    the owner of partition p: "<id> <heartbeat time>"
//
// Every replica heartbeats its own key and the keys of the partitions it
// owns each refresh period (compare-and-set on the key's revision, so a
// lease lost to another replica is noticed at once). A key whose heartbeat
// is older than the lease TTL is dead: its partition may be taken with a
// compare-and-set on the stale revision, so exactly one replica wins.
// Which live replica should own a partition is a pure function of the set
// of live replicas (sorted by name, partitions dealt in turn): every replica
// computes the same answer with no coordination, a joining replica takes
// its share, and a leaving one hands its partitions to the others. A replica releases a partition only
// after its release hook returned (consumers drained, pods stopped), so the
// next owner starts where it stopped.
package ownership

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Defaults: a dead replica's partitions move within TTL + one period.
const (
	DefaultRefresh = time.Second
	DefaultTTL     = 6 * time.Second
)

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
	Hooks      Hooks
	Log        *zap.Logger
	Now        func() time.Time
}

type lease struct {
	owner string
	at    time.Time
	rev   uint64
}

// Manager runs one replica's side of the leases.
type Manager struct {
	o Options

	mu       sync.Mutex
	view     map[string]lease // every key of the bucket, as last read
	owned    map[int]uint64   // partition -> revision of our lease
	busy     map[int]bool     // acquire or release in progress
	released chan struct{}
}

// CreateBucket creates (or opens) the owners bucket.
func CreateBucket(ctx context.Context, js jetstream.JetStream, nodeToken string) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      BucketName(nodeToken),
		Description: "Splitlet pod worker partition leases",
		History:     1,
		// keys of replicas that died are garbage-collected eventually.
		TTL:     10 * time.Minute,
		Storage: jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("owners bucket: %w", err)
	}
	return kv, nil
}

// New returns a manager.
func New(o Options) *Manager {
	if o.Refresh <= 0 {
		o.Refresh = DefaultRefresh
	}
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Manager{o: o, view: map[string]lease{}, owned: map[int]uint64{}, busy: map[int]bool{}}
}

func partKey(p int) string        { return "partition." + strconv.Itoa(p) }
func replicaKey(id string) string { return "replica." + id }

func (m *Manager) value() []byte {
	return []byte(m.o.ID + " " + strconv.FormatInt(m.o.Now().UnixMilli(), 10))
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
		}
	}
}

func (m *Manager) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m.mu.Lock()
	parts := make([]int, 0, len(m.owned))
	for p := range m.owned {
		parts = append(parts, p)
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Add(1)
		go func(p int) { defer wg.Done(); m.release(ctx, p) }(p)
	}
	wg.Wait()
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
	t := time.NewTicker(m.o.Refresh)
	defer t.Stop()
	for {
		m.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (m *Manager) refresh(ctx context.Context) {
	if _, err := m.o.KV.Put(ctx, replicaKey(m.o.ID), m.value()); err != nil && ctx.Err() == nil {
		m.o.Log.Warn("cannot heartbeat replica key", zap.Error(err))
	}
	m.mu.Lock()
	owned := make(map[int]uint64, len(m.owned))
	for p, rev := range m.owned {
		owned[p] = rev
	}
	m.mu.Unlock()
	for p, rev := range owned {
		nrev, err := m.o.KV.Update(ctx, partKey(p), m.value(), rev)
		m.mu.Lock()
		if _, still := m.owned[p]; still && m.owned[p] == rev {
			if err == nil {
				m.owned[p] = nrev
			} else if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyNotFound) {
				// someone else holds it now: stop working on it.
				m.o.Log.Warn("partition lease lost", zap.Int("partition", p), zap.Error(err))
				delete(m.owned, p)
				m.busy[p] = true
				go func(p int) {
					m.o.Hooks.Release(context.Background(), p, true)
					m.mu.Lock()
					delete(m.busy, p)
					m.mu.Unlock()
					m.changed()
				}(p)
			}
		}
		m.mu.Unlock()
	}
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

// preferred is the replica that should own p: the live replicas, sorted
// by name, take the partitions in turn, so every replica computes the same
// answer and the shares differ by at most one.
func preferred(p int, live []string) string {
	if len(live) == 0 {
		return ""
	}
	return live[p%len(live)]
}

// balance acquires the partitions this replica should own and that are
// free, and releases those another live replica should own.
func (m *Manager) balance(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	now := m.o.Now()
	m.mu.Lock()
	live := m.liveLocked(now)
	var take []struct {
		p   int
		rev uint64
	}
	var give []int
	for p := 0; p < m.o.Partitions; p++ {
		if m.busy[p] {
			continue
		}
		want := preferred(p, live) == m.o.ID
		_, mine := m.owned[p]
		l, held := m.view[partKey(p)]
		dead := !held || now.Sub(l.at) >= m.o.TTL || !slices.Contains(live, l.owner)
		switch {
		case mine && !want:
			give = append(give, p)
		case !mine && want && (dead || l.owner == m.o.ID):
			rev := uint64(0)
			if held {
				rev = l.rev
			}
			take = append(take, struct {
				p   int
				rev uint64
			}{p, rev})
		}
	}
	for _, t := range take {
		m.busy[t.p] = true
	}
	for _, p := range give {
		m.busy[p] = true
	}
	m.mu.Unlock()
	for _, p := range give {
		go m.release(context.Background(), p)
	}
	for _, t := range take {
		go m.acquire(ctx, t.p, t.rev)
	}
}

func (m *Manager) acquire(ctx context.Context, p int, staleRev uint64) {
	defer func() {
		m.mu.Lock()
		delete(m.busy, p)
		m.mu.Unlock()
		m.changed()
	}()
	var rev uint64
	var err error
	if staleRev == 0 {
		rev, err = m.o.KV.Create(ctx, partKey(p), m.value())
	} else {
		rev, err = m.o.KV.Update(ctx, partKey(p), m.value(), staleRev)
	}
	if err != nil {
		m.o.Log.Debug("partition lease not taken", zap.Int("partition", p), zap.Error(err))
		return
	}
	m.mu.Lock()
	m.owned[p] = rev
	m.mu.Unlock()
	if err := m.o.Hooks.Acquire(ctx, p); err != nil {
		m.o.Log.Warn("cannot take partition over, giving it back", zap.Int("partition", p), zap.Error(err))
		m.mu.Lock()
		rev := m.owned[p]
		delete(m.owned, p)
		m.mu.Unlock()
		m.o.Hooks.Release(context.Background(), p, false)
		m.deleteLease(context.Background(), p, rev)
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
	// the lease stays refreshed while the partition drains.
	m.o.Hooks.Release(ctx, p, false)
	m.mu.Lock()
	rev, ok := m.owned[p]
	delete(m.owned, p)
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

// OwnedList lists the partitions this replica owns.
func (m *Manager) OwnedList() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]int, 0, len(m.owned))
	for p := range m.owned {
		out = append(out, p)
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
		if !ok || now.Sub(l.at) >= m.o.TTL || !slices.Contains(live, l.owner) || (l.owner == m.o.ID && m.busy[p]) {
			unowned = append(unowned, p)
		}
	}
	return unowned, live
}
