// Package readiness holds the Node's Ready condition until the pod workers
// say the agent is ready (seed 000's NodeController: NotifyAgentReady,
// WaitAgentReady).
//
// States:
//
//	unknown    nothing heard yet                      -> not ready
//	announced  last AgentReadiness heard < timeout ago -> its ready flag
//	silent     last AgentReadiness heard >= timeout ago -> not ready
//
// Grace: once the agent has been ready, a not-ready announcement is held
// back for the grace period (default 20 s) and the Node stays Ready: a pod
// worker restarting or handing partitions over for a few seconds is not an
// outage, as a kubelet restarting within the node monitor's grace period
// leaves its Node Ready. Not-ready that lasts the grace, and silence
// (timeout), still make the Node NotReady.
//
// The pod workers re-send AgentReadiness every 10 s on state.agent (the
// state stream keeps its last value); silence for the timeout (40 s) means
// the workers are gone. The time a message was heard is its sentAt, capped at
// the local clock, so the last value replayed at start from the stream does
// not pass for a fresh heartbeat.
package readiness

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/logging"
)

// Reasons of a not-ready agent that the gate itself gives.
const (
	ReasonNotAnnounced  = "AgentNotReady"
	ReasonHeartbeatLost = "AgentHeartbeatLost"
)

// DefaultTimeout is how long the gate trusts an announcement without a heartbeat.
const DefaultTimeout = 40 * time.Second

// DefaultGrace is how long a not-ready announcement after readiness is held back.
const DefaultGrace = 20 * time.Second

// Gate tracks the agent's readiness.
type Gate struct {
	timeout time.Duration
	grace   time.Duration
	now     func() time.Time
	log     *zap.Logger

	mu      sync.Mutex
	heard   time.Time
	last    *bus.AgentReadiness
	runtime string // the runtime the announcements name
	lastSeq map[string]uint64
	// wasReady: some announcement said ready; notReadySince: when the
	// not-ready announcements that follow a ready one began (zero: none).
	wasReady      bool
	notReadySince time.Time
	reported      bool   // the readiness last evaluated
	answer        string // the reason and message last evaluated
	waiters       chan struct{}
	changed       chan struct{}
	renewed       chan struct{}
}

// Option tunes a Gate.
type Option func(*Gate)

// WithTimeout sets how long silence is tolerated.
func WithTimeout(d time.Duration) Option { return func(g *Gate) { g.timeout = d } }

// WithGrace sets how long a not-ready announcement that follows readiness
// is held back (0: none).
func WithGrace(d time.Duration) Option { return func(g *Gate) { g.grace = d } }

// WithLogger sets the logger.
func WithLogger(l *zap.Logger) Option { return func(g *Gate) { g.log = l } }

// WithClock replaces time.Now (tests).
func WithClock(now func() time.Time) Option { return func(g *Gate) { g.now = now } }

// New returns a gate that is not ready.
func New(opts ...Option) *Gate {
	g := &Gate{
		timeout: DefaultTimeout,
		grace:   DefaultGrace,
		now:     time.Now,
		log:     zap.NewNop(),
		lastSeq: map[string]uint64{},
		waiters: make(chan struct{}),
		changed: make(chan struct{}, 1),
		renewed: make(chan struct{}, 1),
	}
	for _, o := range opts {
		o(g)
	}
	return g
}

// Changed is signalled when readiness may have changed.
func (g *Gate) Changed() <-chan struct{} { return g.changed }

func (g *Gate) signal() {
	select {
	case g.changed <- struct{}{}:
	default:
	}
}

// NotifyAgentReady records an announcement heard at the given time.
func (g *Gate) NotifyAgentReady(at time.Time, r *bus.AgentReadiness) {
	g.mu.Lock()
	if now := g.now(); at.After(now) {
		at = now
	}
	if at.Before(g.heard) {
		g.mu.Unlock()
		return
	}
	g.heard = at
	switch {
	case r.Ready:
		g.wasReady, g.notReadySince = true, time.Time{}
	case g.wasReady && g.notReadySince.IsZero():
		g.notReadySince = at
	}
	cp := *r
	newRuntime := cp.Runtime != "" && cp.Runtime != g.runtime
	if cp.Runtime != "" {
		g.runtime = cp.Runtime
	}
	g.last = &cp
	g.mu.Unlock()
	select {
	case g.renewed <- struct{}{}:
	default:
	}
	if newRuntime {
		g.signal()
	}
	g.evaluate()
}

// RuntimeVersion is the container runtime the pod workers last named
// ("containerd://1.6.20"), empty before any did.
func (g *Gate) RuntimeVersion() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.runtime
}

// Observe takes a decoded AgentReadiness message from the bus; a message
// not newer than the last of its source is dropped.
func (g *Gate) Observe(e *bus.Envelope, r *bus.AgentReadiness) {
	g.mu.Lock()
	if e.Seq <= g.lastSeq[e.Source] {
		g.mu.Unlock()
		return
	}
	g.lastSeq[e.Source] = e.Seq
	g.mu.Unlock()
	g.NotifyAgentReady(e.SentAt, r)
}

// AgentReady reports readiness and, when not ready, the reason and message.
func (g *Gate) AgentReady() (bool, string, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stateLocked(g.now())
}

func (g *Gate) stateLocked(now time.Time) (bool, string, string) {
	switch {
	case g.last == nil:
		return false, ReasonNotAnnounced, "pod workers have not announced readiness yet"
	case now.Sub(g.heard) >= g.timeout:
		return false, ReasonHeartbeatLost, fmt.Sprintf("no pod worker readiness heartbeat for %s (last at %s)", g.timeout, g.heard.UTC().Format(time.RFC3339))
	case !g.last.Ready && g.inGraceLocked(now):
		return true, "", ""
	case !g.last.Ready:
		reason, msg := g.last.Reason, g.last.Message
		if reason == "" {
			reason = ReasonNotAnnounced
		}
		if msg == "" {
			msg = "pod workers report not ready"
		}
		return false, reason, msg
	}
	return true, "", ""
}

// inGraceLocked: a not-ready announcement that followed readiness is still
// within its grace.
func (g *Gate) inGraceLocked(now time.Time) bool {
	return !g.notReadySince.IsZero() && now.Sub(g.notReadySince) < g.grace
}

// evaluate wakes the waiters when the agent became ready, and signals a
// change when the answer (readiness, reason or message) changed.
func (g *Gate) evaluate() {
	g.mu.Lock()
	ready, reason, msg := g.stateLocked(g.now())
	flipped := ready != g.reported
	answer := reason + "\x00" + msg
	changed := flipped || answer != g.answer
	g.reported, g.answer = ready, answer
	if ready && flipped {
		close(g.waiters)
	}
	if !ready && flipped {
		g.waiters = make(chan struct{})
	}
	g.mu.Unlock()
	if flipped {
		g.log.Info("agent readiness changed", zap.Bool("ready", ready), zap.String("reason", reason), zap.String("message", msg))
	}
	if changed {
		g.signal()
	}
}

// WaitAgentReady blocks until the agent is ready or ctx ends.
func (g *Gate) WaitAgentReady(ctx context.Context) error {
	for {
		g.mu.Lock()
		ready, _, _ := g.stateLocked(g.now())
		ch := g.waiters
		g.mu.Unlock()
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// expiry is when the answer may next change by itself: the current
// announcement goes stale, or a held-back not-ready one ends its grace; zero
// if nothing was heard.
func (g *Gate) expiry() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.last == nil {
		return time.Time{}
	}
	exp := g.heard.Add(g.timeout)
	if now := g.now(); g.inGraceLocked(now) {
		if end := g.notReadySince.Add(g.grace); end.Before(exp) {
			exp = end
		}
	}
	return exp
}

// Run consumes state.agent of the node from the state stream with an
// ordered consumer that starts at the last value, and re-evaluates when an
// announcement goes stale. It returns when ctx ends.
func (g *Gate) Run(ctx context.Context, js jetstream.JetStream, node string) {
	subject := bus.For(node).AgentReady()
	log := g.log.With(zap.String(logging.FieldSubject, subject))
	go g.watchExpiry(ctx)
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(min(time.Duration(attempt)*500*time.Millisecond, 5*time.Second)):
			}
		}
		cons, err := js.OrderedConsumer(ctx, bus.StreamName(node, bus.StreamState), jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{subject},
			DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
			NamePrefix:     bus.OrderedName("nodehb-agent"),
		})
		if err != nil {
			log.Warn("agent readiness consumer not ready, retrying", zap.Error(err))
			continue
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			e, err := bus.Decode(m.Data())
			if err != nil {
				log.Warn("malformed AgentReadiness dropped", zap.Error(err))
				return
			}
			r, err := bus.DecodeAgentReadiness(e)
			if err != nil {
				log.Warn("malformed AgentReadiness dropped", zap.Error(err))
				return
			}
			g.Observe(e, r)
		})
		if err != nil {
			log.Warn("agent readiness consumer not ready, retrying", zap.Error(err))
			continue
		}
		<-ctx.Done()
		cc.Stop()
		return
	}
}

// watchExpiry re-evaluates when the last announcement goes stale.
func (g *Gate) watchExpiry(ctx context.Context) {
	for {
		wait := time.Hour
		if exp := g.expiry(); !exp.IsZero() {
			if d := exp.Sub(g.now()); d > 0 {
				wait = d + 10*time.Millisecond
			} else {
				g.evaluate()
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-g.renewed:
			t.Stop()
		}
	}
}
