package ownership

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/splitlet/splitlet/libs/testenv"
)

// replica is one Manager with hooks that record what it holds.
type replica struct {
	m        *Manager
	mu       sync.Mutex
	active   map[int]bool
	released map[int]int
	lost     map[int]int
	cancel   context.CancelFunc
	done     chan struct{}
	t        *testing.T
}

func (r *replica) holds() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	for p, on := range r.active {
		if on {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

func startReplica(t *testing.T, kv jetstream.KeyValue, id string, partitions int) *replica {
	return startReplicaTTL(t, kv, id, partitions, 600*time.Millisecond, nil)
}

// startReplicaTTL starts a replica; onAcquire, if set, runs in its Acquire hook.
func startReplicaTTL(t *testing.T, kv jetstream.KeyValue, id string, partitions int, ttl time.Duration, onAcquire func(p int)) *replica {
	r := &replica{active: map[int]bool{}, released: map[int]int{}, lost: map[int]int{}, done: make(chan struct{}), t: t}
	r.m = New(Options{KV: kv, ID: id, Partitions: partitions, Refresh: 100 * time.Millisecond, TTL: ttl,
		Hooks: Hooks{
			Acquire: func(_ context.Context, p int) error {
				if onAcquire != nil {
					onAcquire(p)
				}
				r.mu.Lock()
				r.active[p] = true
				r.mu.Unlock()
				return nil
			},
			Release: func(_ context.Context, p int, lost bool) {
				r.mu.Lock()
				r.active[p] = false
				r.released[p]++
				if lost {
					r.lost[p]++
				}
				r.mu.Unlock()
			},
		}})
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { defer close(r.done); r.m.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *replica) stop() {
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		r.t.Error("a replica's Run did not return within 10 s of its cancel")
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.EventuallyTrue(t, 15*time.Second, what, cond)
}

// exclusive: every partition held by exactly one replica.
func exclusive(partitions int, rs ...*replica) bool {
	count := make([]int, partitions)
	for _, r := range rs {
		for _, p := range r.holds() {
			count[p]++
		}
	}
	for _, c := range count {
		if c != 1 {
			return false
		}
	}
	return true
}

func TestPartitionsSharedAndMoved(t *testing.T) {
	n := testenv.NATSForTest(t)
	_, js := n.Connect(t)
	kv, err := CreateBucket(t.Context(), js, "own-test", 1)
	if err != nil {
		t.Fatal(err)
	}
	const parts = 8
	a := startReplica(t, kv, "a", parts)
	eventually(t, "a owns everything", func() bool { return len(a.holds()) == parts })
	b := startReplica(t, kv, "b", parts)
	c := startReplica(t, kv, "c", parts)
	eventually(t, "three-way split", func() bool {
		return exclusive(parts, a, b, c) && len(a.holds()) >= 2 && len(b.holds()) >= 2 && len(c.holds()) >= 2
	})
	if unowned, live := a.m.Status(); len(unowned) != 0 || len(live) != 3 {
		t.Fatalf("status: unowned %v live %v", unowned, live)
	}
	// graceful leave: the others take its share.
	c.stop()
	eventually(t, "two-way split after c left", func() bool { return exclusive(parts, a, b) && len(c.holds()) == 0 })
	// a lease taken behind a replica's back (it paused past the TTL) is
	// noticed on the watch, and the work on it stops.
	p := a.holds()[0]
	a.mu.Lock()
	before := a.released[p]
	a.mu.Unlock()
	e, err := kv.Get(t.Context(), partKey(p))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(t.Context(), partKey(p), []byte(fmt.Sprintf("intruder %d", time.Now().UnixMilli())), e.Revision()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a lets the stolen partition go", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.released[p] > before
	})
	// the thief is no live replica: its lease is dead, and a (preferred) takes p back.
	eventually(t, "a owns the partition again", func() bool { return slices.Contains(a.holds(), p) && exclusive(parts, a, b) })
}

// TestTakeOverListedOnceDone: a partition whose Acquire hook has not
// returned is held (its key names the replica, whose heartbeat keeps it)
// but not listed as owned; it is listed once the hook returns.
func TestTakeOverListedOnceDone(t *testing.T) {
	n := testenv.NATSForTest(t)
	_, js := n.Connect(t)
	kv, err := CreateBucket(t.Context(), js, "own-taking", 1)
	if err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	entered := make(chan int, 4)
	a := startReplicaTTL(t, kv, "a", 2, 600*time.Millisecond, func(p int) {
		if p == 1 {
			entered <- p
			<-hold
		}
	})
	select {
	case <-entered:
	case <-t.Context().Done():
		t.Fatal("partition 1's Acquire hook never ran")
	case <-time.After(30 * time.Second):
		t.Fatal("partition 1's Acquire hook never ran")
	}
	eventually(t, "partition 0 listed", func() bool { return slices.Equal(a.m.OwnedList(), []int{0}) })
	if !a.m.Owned(1) {
		t.Error("a partition under take-over is not held (its lease goes unheartbeated)")
	}
	// the lease outlives several TTLs while the hook runs: it is heartbeated.
	deadline := time.Now().Add(3 * 600 * time.Millisecond)
	for time.Now().Before(deadline) {
		if got := a.m.OwnedList(); !slices.Equal(got, []int{0}) {
			t.Fatalf("owned %v while partition 1's take-over runs, want [0]", got)
		}
		time.Sleep(50 * time.Millisecond) // sampling the listing over three TTLs
	}
	e, err := kv.Get(t.Context(), partKey(1))
	if err != nil {
		t.Fatal(err)
	}
	r, err := kv.Get(t.Context(), replicaKey("a"))
	if err != nil {
		t.Fatal(err)
	}
	if owner, _ := parse(e.Value()); owner != "a" {
		t.Errorf("partition 1's lease names %q during its take-over", owner)
	}
	if _, at := parse(r.Value()); time.Since(at) > 600*time.Millisecond {
		t.Errorf("a's heartbeat, which keeps partition 1's lease, is from %v: not heartbeated during the take-over", at)
	}
	close(hold)
	eventually(t, "partition 1 listed once its hook returned", func() bool { return slices.Equal(a.m.OwnedList(), []int{0, 1}) })
}
