package ownership

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/splitlet/splitlet/libs/testenv"
)

// cutKV is a bucket a replica can be cut off from: once cut, every write
// fails, as for a replica that lost its NATS server (or was killed -9).
type cutKV struct {
	jetstream.KeyValue
	cut atomic.Bool
}

var errCut = errors.New("cut off from NATS")

func (k *cutKV) Put(ctx context.Context, key string, v []byte) (uint64, error) {
	if k.cut.Load() {
		return 0, errCut
	}
	return k.KeyValue.Put(ctx, key, v)
}

func (k *cutKV) Create(ctx context.Context, key string, v []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if k.cut.Load() {
		return 0, errCut
	}
	return k.KeyValue.Create(ctx, key, v, opts...)
}

func (k *cutKV) Update(ctx context.Context, key string, v []byte, rev uint64) (uint64, error) {
	if k.cut.Load() {
		return 0, errCut
	}
	return k.KeyValue.Update(ctx, key, v, rev)
}

func (k *cutKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	if k.cut.Load() {
		return errCut
	}
	return k.KeyValue.Delete(ctx, key, opts...)
}

func (k *cutKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if k.cut.Load() {
		return nil, errCut
	}
	return k.KeyValue.Get(ctx, key)
}

func bucket(t *testing.T, name string) jetstream.KeyValue {
	t.Helper()
	n := testenv.NATSForTest(t)
	_, js := n.Connect(t)
	kv, err := CreateBucket(context.Background(), js, name, 1)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// Three replicas, one cut off: it stops acting on each of its partitions
// (fencing) before a survivor takes it, and only its partitions move.
func TestFencedBeforeTakenAndOnlyDeadPartitionsMove(t *testing.T) {
	kv := bucket(t, "own-fence")
	const parts = 16
	cut := &cutKV{KeyValue: kv}
	var mu sync.Mutex
	var victim *replica
	var violations []string
	check := func(id string) func(p int) {
		return func(p int) {
			mu.Lock()
			defer mu.Unlock()
			if victim == nil {
				return
			}
			victim.mu.Lock()
			defer victim.mu.Unlock()
			if victim.active[p] {
				violations = append(violations, fmt.Sprintf("%s took partition %d while the cut-off replica still acted on it", id, p))
			}
		}
	}
	a := startReplicaTTL(t, kv, "a", parts, time.Second, check("a"))
	b := startReplicaTTL(t, kv, "b", parts, time.Second, check("b"))
	c := startReplicaTTL(t, cut, "c", parts, time.Second, nil)
	eventually(t, "three-way split by rendezvous", func() bool {
		if !exclusive(parts, a, b, c) {
			return false
		}
		for p := 0; p < parts; p++ {
			if !slices.Contains(map[string]*replica{"a": a, "b": b, "c": c}[Preferred(p, []string{"a", "b", "c"})].holds(), p) {
				return false
			}
		}
		return true
	})
	aBefore, bBefore, cParts := a.holds(), b.holds(), c.holds()
	if len(cParts) == 0 {
		t.Fatal("c owns nothing: the test would prove nothing")
	}
	mu.Lock()
	victim = c
	mu.Unlock()
	cut.cut.Store(true)
	eventually(t, "survivors own everything", func() bool { return exclusive(parts, a, b) })
	mu.Lock()
	if len(violations) > 0 {
		t.Fatal(strings.Join(violations, "\n"))
	}
	mu.Unlock()
	for _, p := range cParts {
		c.mu.Lock()
		lost := c.lost[p]
		c.mu.Unlock()
		if lost == 0 {
			t.Fatalf("partition %d: the cut-off replica never fenced it", p)
		}
	}
	// the survivors kept what they had and only gained c's partitions.
	for _, r := range []struct {
		r      *replica
		before []int
	}{{a, aBefore}, {b, bBefore}} {
		for _, p := range r.before {
			if !slices.Contains(r.r.holds(), p) {
				t.Fatalf("a survivor lost partition %d", p)
			}
			r.r.mu.Lock()
			n := r.r.released[p]
			r.r.mu.Unlock()
			if n != 0 {
				t.Fatalf("a survivor released partition %d", p)
			}
		}
		for _, p := range r.r.holds() {
			if !slices.Contains(r.before, p) && !slices.Contains(cParts, p) {
				t.Fatalf("partition %d moved between survivors", p)
			}
		}
	}
	if m := FenceMargin(100*time.Millisecond, time.Second); m <= 0 || m >= time.Second {
		t.Fatalf("fence margin %v", m)
	}
}

// A lease rewritten behind its owner's back, still naming it (a retried
// write after a NATS restart), is adopted from the watch: the owner's next
// write goes on the new revision, and nothing is released.
func TestLeaseRevisionAdoptedFromWatch(t *testing.T) {
	kv := bucket(t, "own-reclaim")
	a := startReplica(t, kv, "a", 2)
	eventually(t, "a owns both", func() bool { return len(a.holds()) == 2 })
	ctx := t.Context()
	rev, err := kv.Put(ctx, partKey(0), []byte(fmt.Sprintf("a %d", time.Now().UnixMilli())))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "a adopts the lease's new revision", func() bool {
		a.m.mu.Lock()
		defer a.m.mu.Unlock()
		return a.m.owned[0] == rev
	})
	a.m.rewrite(ctx)
	if e, err := kv.Get(ctx, partKey(0)); err != nil || e.Revision() <= rev || !strings.HasPrefix(string(e.Value()), "a ") {
		t.Fatalf("a's rewrite on the adopted revision: %v", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.released[0] != 0 || !a.active[0] {
		t.Fatalf("partition 0 released %d times, active %v", a.released[0], a.active[0])
	}
}

// An idle owner writes only its replica key: its partition keys keep their
// revisions, and another replica sees every lease alive for many TTLs, from
// the heartbeat alone. A key that vanished (the bucket's max age) is
// written again by the next rewrite.
func TestIdleOwnerWritesOnlyItsHeartbeat(t *testing.T) {
	kv := bucket(t, "own-idle")
	const parts, ttl = 8, 600 * time.Millisecond
	a := startReplicaTTL(t, kv, "a", parts, ttl, nil)
	eventually(t, "a owns everything", func() bool { return len(a.holds()) == parts })
	ctx := t.Context()
	revs := map[int]uint64{}
	for p := range parts {
		e, err := kv.Get(ctx, partKey(p))
		if err != nil {
			t.Fatal(err)
		}
		revs[p] = e.Revision()
	}
	seq := func() uint64 {
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
	}
	// an observer that owns nothing: it judges a's leases as any replica does.
	obs := New(Options{KV: kv, ID: "observer", Partitions: parts, Refresh: 100 * time.Millisecond, TTL: ttl})
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go obs.watch(wctx, make(chan struct{}, 1))
	eventually(t, "the observer has read the bucket", func() bool { unowned, _ := obs.Status(); return len(unowned) == 0 })
	start, from := time.Now(), seq()
	for time.Since(start) < 4*ttl {
		if unowned, _ := obs.Status(); len(unowned) != 0 {
			t.Fatalf("the observer sees partitions %v unowned while a heartbeats", unowned)
		}
		time.Sleep(50 * time.Millisecond) // sampling the observer's view over four TTLs
	}
	periods := uint64(time.Since(start)/(100*time.Millisecond)) + 2
	if n := seq() - from; n > periods {
		t.Fatalf("%d writes to the bucket in %d refresh periods: more than the heartbeat", n, periods-2)
	}
	for p, rev := range revs {
		if e, err := kv.Get(ctx, partKey(p)); err != nil || e.Revision() != rev {
			t.Fatalf("partition %d's key rewritten while idle: %v", p, err)
		}
	}
	if err := kv.Delete(ctx, partKey(3)); err != nil {
		t.Fatal(err)
	}
	a.m.rewrite(ctx)
	if e, err := kv.Get(ctx, partKey(3)); err != nil || !strings.HasPrefix(string(e.Value()), "a ") {
		t.Fatalf("a held key that vanished is not written again: %v", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.released[3] != 0 || !a.active[3] {
		t.Fatalf("partition 3 released %d times, active %v", a.released[3], a.active[3])
	}
}

// A replica killed without releasing (its connection cut) and started again
// with the same id resumes its leases at once, long before their TTL.
func TestRestartWithSameIDResumesLeases(t *testing.T) {
	kv := bucket(t, "own-restart")
	cut := &cutKV{KeyValue: kv}
	const ttl = time.Minute
	a := startReplicaTTL(t, cut, "a", 4, ttl, nil)
	eventually(t, "a owns everything", func() bool { return len(a.holds()) == 4 })
	cut.cut.Store(true) // kill -9: nothing more reaches the bucket
	a.stop()
	start := time.Now()
	id, stop, err := ClaimID(t.Context(), kv, "a", 100*time.Millisecond, ttl, zap.NewNop())
	if err != nil || id != "a" {
		t.Fatalf("ClaimID after the holder died: %q, %v", id, err)
	}
	a2 := startReplicaTTL(t, kv, id, 4, ttl, nil)
	stop()
	eventually(t, "the restarted replica owns everything", func() bool { return len(a2.holds()) == 4 })
	if took := time.Since(start); took >= ttl/2 {
		t.Fatalf("resuming took %v: it waited for the TTL", took)
	}
}

// A second live replica with the same id gets another one.
func TestClaimIDOfLiveReplica(t *testing.T) {
	kv := bucket(t, "own-claim")
	startReplica(t, kv, "x", 2)
	eventually(t, "x heartbeats", func() bool { _, err := kv.Get(t.Context(), replicaKey("x")); return err == nil })
	id, stop, err := ClaimID(t.Context(), kv, "x", 100*time.Millisecond, 600*time.Millisecond, zap.NewNop())
	if err != nil || id == "x" || !strings.HasPrefix(id, "x-") || ValidID(id) != nil {
		t.Fatalf("ClaimID beside a live x: %q, %v", id, err)
	}
	stop()
	id, stop, err = ClaimID(t.Context(), kv, "free", time.Second, 6*time.Second, zap.NewNop())
	if err != nil || id != "free" {
		t.Fatalf("ClaimID of a free id: %q, %v", id, err)
	}
	stop()
	// two replicas claiming one free id at once get two ids.
	got := make(chan string, 2)
	for range 2 {
		go func() {
			id, stop, err := ClaimID(context.Background(), kv, "twin", 100*time.Millisecond, 600*time.Millisecond, zap.NewNop())
			if err != nil {
				t.Error(err)
			}
			got <- id
			t.Cleanup(stop)
		}()
	}
	var ids [2]string
	for i := range ids {
		select {
		case ids[i] = <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("simultaneous claims: %d of 2 returned within 10 s", i)
		}
	}
	if x, y := ids[0], ids[1]; x == y {
		t.Fatalf("simultaneous claims both got %q", x)
	}
	for _, bad := range []string{"", "a b", "a..b", ".a", "a*"} {
		if ValidID(bad) == nil {
			t.Fatalf("ValidID(%q) accepted", bad)
		}
	}
}

// A heartbeat that fails because a release of this replica deleted the
// lease meanwhile does not bring the lease back (it would name a replica
// that neither renews nor frees it); one whose lease vanished while still
// held claims it again.
func TestHeartbeatRacingReleaseLeavesLeaseGone(t *testing.T) {
	kv := bucket(t, "own-race")
	m := New(Options{KV: kv, ID: "a", Partitions: 2, Refresh: 100 * time.Millisecond, TTL: 600 * time.Millisecond})
	ctx := t.Context()
	lost := errors.New("wrong last sequence")
	if _, _, err := m.reclaim(ctx, 0, lost); !errors.Is(err, errReleased) {
		t.Fatalf("reclaim of a released partition: %v, want errReleased", err)
	}
	if _, err := kv.Get(ctx, partKey(0)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the released partition's lease came back: %v", err)
	}
	m.mu.Lock()
	m.owned[1] = 1
	m.mu.Unlock()
	if _, _, err := m.reclaim(ctx, 1, lost); err != nil {
		t.Fatalf("reclaim of a held partition: %v", err)
	}
	if e, err := kv.Get(ctx, partKey(1)); err != nil || !strings.HasPrefix(string(e.Value()), "a ") {
		t.Fatalf("the held partition's lease: %v", err)
	}
}
