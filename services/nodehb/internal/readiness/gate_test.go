package readiness

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/splitlet/splitlet/libs/bus"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func env(source string, seq uint64, at time.Time) *bus.Envelope {
	return &bus.Envelope{Source: source, Seq: seq, SentAt: at}
}

func TestGateStates(t *testing.T) {
	clk := &clock{t: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)}
	g := New(WithTimeout(40*time.Second), WithClock(clk.now))
	if ok, reason, msg := g.AgentReady(); ok || reason != ReasonNotAnnounced || msg == "" {
		t.Fatalf("initial: %v %s %q", ok, reason, msg)
	}
	g.Observe(env("pw", 1, clk.now()), &bus.AgentReadiness{Ready: false, Partitions: 4, Reason: "PartitionsUnowned", Message: "1 of 4"})
	if ok, reason, msg := g.AgentReady(); ok || reason != "PartitionsUnowned" || msg != "1 of 4" {
		t.Fatalf("announced not ready: %v %s %q", ok, reason, msg)
	}
	g.Observe(env("pw", 2, clk.now()), &bus.AgentReadiness{Ready: true, Partitions: 4})
	if ok, _, _ := g.AgentReady(); !ok {
		t.Fatal("not ready after a ready announcement")
	}
	// A stale redelivery (lower seq) changes nothing.
	g.Observe(env("pw", 1, clk.now()), &bus.AgentReadiness{Ready: false, Partitions: 4})
	if ok, _, _ := g.AgentReady(); !ok {
		t.Fatal("stale message taken")
	}
	clk.add(39 * time.Second)
	if ok, _, _ := g.AgentReady(); !ok {
		t.Fatal("not ready before the timeout")
	}
	clk.add(time.Second)
	if ok, reason, _ := g.AgentReady(); ok || reason != ReasonHeartbeatLost {
		t.Fatalf("after 40 s of silence: %v %s", ok, reason)
	}
	g.Observe(env("pw", 3, clk.now()), &bus.AgentReadiness{Ready: true, Partitions: 4})
	if ok, _, _ := g.AgentReady(); !ok {
		t.Fatal("not ready after the heartbeat returned")
	}
}

// TestOldLastValueIsNotFresh: the last value replayed from the state stream
// at start counts from when it was sent.
func TestOldLastValueIsNotFresh(t *testing.T) {
	now := time.Now()
	g := New(WithTimeout(40 * time.Second))
	g.Observe(env("pw", 1, now.Add(-time.Hour)), &bus.AgentReadiness{Ready: true, Partitions: 4})
	if ok, reason, _ := g.AgentReady(); ok || reason != ReasonHeartbeatLost {
		t.Fatalf("an hour-old announcement taken as fresh: %v %s", ok, reason)
	}
}

func TestWaitAgentReady(t *testing.T) {
	g := New()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := g.WaitAgentReady(ctx); err == nil {
		t.Fatal("returned before readiness")
	}
	done := make(chan error, 1)
	go func() { done <- g.WaitAgentReady(context.Background()) }()
	g.NotifyAgentReady(time.Now(), &bus.AgentReadiness{Ready: true, Partitions: 1})
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitAgentReady did not return after readiness")
	}
}

// TestChangedOnlyOnChange: a heartbeat that repeats the answer does not
// wake the status controller; a new answer does.
func TestChangedOnlyOnChange(t *testing.T) {
	g := New(WithGrace(0))
	drain := func() bool {
		select {
		case <-g.Changed():
			return true
		default:
			return false
		}
	}
	g.Observe(env("pw", 1, time.Now()), &bus.AgentReadiness{Ready: true, Partitions: 1})
	if !drain() {
		t.Fatal("becoming ready not signalled")
	}
	g.Observe(env("pw", 2, time.Now()), &bus.AgentReadiness{Ready: true, Partitions: 1})
	if drain() {
		t.Fatal("an identical heartbeat signalled a change")
	}
	g.Observe(env("pw", 3, time.Now()), &bus.AgentReadiness{Ready: false, Partitions: 1, Reason: "PartitionsUnowned"})
	if !drain() {
		t.Fatal("becoming not ready not signalled")
	}
}

// TestNotReadyGrace: after readiness, a not-ready announcement (a pod
// worker restarting, partitions handed over) keeps the answer ready for the
// grace; one that lasts past it, and silence, make it not ready. Before the
// first readiness there is no grace.
func TestNotReadyGrace(t *testing.T) {
	clk := &clock{t: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)}
	g := New(WithTimeout(40*time.Second), WithGrace(20*time.Second), WithClock(clk.now))
	notReady := &bus.AgentReadiness{Ready: false, Partitions: 4, Reason: "PartitionsUnowned", Message: "1 of 4"}
	g.Observe(env("pw", 1, clk.now()), notReady)
	if ok, reason, _ := g.AgentReady(); ok || reason != "PartitionsUnowned" {
		t.Fatalf("not ready before any readiness was held back: %v %s", ok, reason)
	}
	g.Observe(env("pw", 2, clk.now()), &bus.AgentReadiness{Ready: true, Partitions: 4})
	clk.add(time.Second)
	g.Observe(env("pw", 3, clk.now()), notReady)
	if exp := g.expiry(); !exp.Equal(clk.now().Add(20 * time.Second)) {
		t.Errorf("expiry %v, want the end of the grace %v", exp, clk.now().Add(20*time.Second))
	}
	clk.add(10 * time.Second)
	g.Observe(env("pw", 4, clk.now()), notReady) // a heartbeat does not restart the grace
	if ok, _, _ := g.AgentReady(); !ok {
		t.Fatal("not ready within the grace")
	}
	clk.add(9 * time.Second)
	if ok, _, _ := g.AgentReady(); !ok {
		t.Fatal("not ready 19 s into a 20 s grace")
	}
	clk.add(time.Second)
	if ok, reason, msg := g.AgentReady(); ok || reason != "PartitionsUnowned" || msg != "1 of 4" {
		t.Fatalf("still ready after the grace: %v %s %q", ok, reason, msg)
	}
	// Ready again: a later not-ready gets a new grace.
	g.Observe(env("pw", 5, clk.now()), &bus.AgentReadiness{Ready: true, Partitions: 4})
	g.Observe(env("pw", 6, clk.now()), notReady)
	if ok, _, _ := g.AgentReady(); !ok {
		t.Fatal("a new not-ready after readiness had no grace")
	}
	// Silence is not held back by the grace.
	clk.add(40 * time.Second)
	if ok, reason, _ := g.AgentReady(); ok || reason != ReasonHeartbeatLost {
		t.Fatalf("silence: %v %s", ok, reason)
	}
}

// TestNoGrace: grace 0 reports not-ready at once.
func TestNoGrace(t *testing.T) {
	g := New(WithGrace(0))
	g.Observe(env("pw", 1, time.Now()), &bus.AgentReadiness{Ready: true, Partitions: 4})
	g.Observe(env("pw", 2, time.Now()), &bus.AgentReadiness{Ready: false, Partitions: 4, Reason: "X"})
	if ok, reason, _ := g.AgentReady(); ok || reason != "X" {
		t.Fatalf("grace 0: %v %s", ok, reason)
	}
}
