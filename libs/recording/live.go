package recording

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/splitlet/splitlet/libs/bus"
)

// LiveOptions are the options of Live.
type LiveOptions struct {
	Node string
	// Stage is the stage whose live and shadow outputs are compared.
	Stage string
	// Ignore: more payload fields left out (as Diff's ignore).
	Ignore []string
	// Since: read both streams from this time on; zero: all they hold.
	Since time.Time
	// Settle is how long the two sides may disagree about a key before it
	// counts as a difference: each stage runs on its own clock, so one
	// reports a change a little before the other (default 5 s).
	Settle time.Duration
	// Every is how often a summary is sent while the diff runs (default
	// 10 s; the last one is sent when it ends).
	Every time.Duration
}

// LiveDifference is a key on which the live and the shadow stage disagreed
// for longer than the settle time: each side's item when the difference
// began (nil: that side said nothing about the key).
type LiveDifference struct {
	Key    string    `json:"key"`
	Pod    string    `json:"pod"`
	Live   *Item     `json:"live"`
	Shadow *Item     `json:"shadow"`
	At     time.Time `json:"at"`
}

// LiveSummary is where a live diff stands.
type LiveSummary struct {
	// Live and Shadow count the messages read from each side; Compared
	// is their sum.
	Live     int `json:"live"`
	Shadow   int `json:"shadow"`
	Compared int `json:"compared"`
	// Keys counts the pods and probes compared.
	Keys int `json:"keys"`
	// Differ counts the keys that differed; Pods their pods.
	Differ int      `json:"differ"`
	Pods   []string `json:"pods"`
	// Skipped counts messages that were not Splitlet envelopes.
	Skipped int `json:"skipped,omitempty"`
}

// LiveEvent is what Live reports as it goes: a key's first difference,
// or a summary.
type LiveEvent struct {
	Difference *LiveDifference `json:"difference,omitempty"`
	Summary    *LiveSummary    `json:"summary,omitempty"`
}

// side is one of the two outputs a live diff reads.
type side int

const (
	sideLive side = iota
	sideShadow
)

// liveKey is what a live diff knows about one key.
type liveKey struct {
	items [2]*Item
	// at is when each side last spoke about the key (the stream's time).
	at [2]time.Time
	// differSince: since when the sides disagree (zero: they agree).
	differSince time.Time
	reported    bool
}

// liveState is a live diff's state, fed one message at a time.
type liveState struct {
	settle  time.Duration
	drop    map[string]bool
	keys    map[string]*liveKey
	sum     LiveSummary
	pods    map[string]bool
	shadow0 time.Time // the shadow's first message in the window
}

// add takes one message of a side.
func (s *liveState) add(sd side, e Entry) {
	items, ok := itemsOf(e, s.drop)
	if !ok {
		s.sum.Skipped++
		return
	}
	if sd == sideLive {
		s.sum.Live++
	} else {
		s.sum.Shadow++
		if s.shadow0.IsZero() {
			s.shadow0 = e.Time
		}
	}
	s.sum.Compared++
	for _, k := range items {
		lk := s.keys[k.key]
		if lk == nil {
			lk = &liveKey{}
			s.keys[k.key] = lk
		}
		it := k.item
		lk.items[sd], lk.at[sd] = &it, e.Time
	}
}

// inScope: a key the shadow spoke about, or that the live stage spoke
// about since the shadow began (a live result from before is of a pod
// that may be gone).
func (s *liveState) inScope(k *liveKey) bool {
	if k.items[sideShadow] != nil {
		return true
	}
	return !s.shadow0.IsZero() && !k.at[sideLive].Before(s.shadow0)
}

// check marks the keys whose sides disagree, and returns those whose
// disagreement has now lasted the settle time (each once).
func (s *liveState) check(now time.Time) []LiveDifference {
	var out []LiveDifference
	s.sum.Keys = 0
	for _, name := range slices.Sorted(maps.Keys(s.keys)) {
		k := s.keys[name]
		if !s.inScope(k) {
			continue
		}
		s.sum.Keys++
		if equalItems(k.items[sideLive], k.items[sideShadow]) {
			k.differSince = time.Time{}
			continue
		}
		if k.differSince.IsZero() {
			k.differSince = now
		}
		if k.reported || now.Sub(k.differSince) < s.settle {
			continue
		}
		k.reported = true
		d := LiveDifference{Key: name, Pod: podOfKey(name), Live: k.items[sideLive], Shadow: k.items[sideShadow], At: now.UTC()}
		s.sum.Differ++
		if !s.pods[d.Pod] {
			s.pods[d.Pod] = true
			s.sum.Pods = append(s.sum.Pods, d.Pod)
			slices.Sort(s.sum.Pods)
		}
		out = append(out, d)
	}
	return out
}

// summary is a copy of the running summary.
func (s *liveState) summary() LiveSummary {
	out := s.sum
	out.Pods = slices.Clone(s.sum.Pods)
	return out
}

func equalItems(a, b *Item) bool { return a != nil && b != nil && *a == *b }

// podOfKey is the pod part of a key (ns/name (uid), without the
// container and probe).
func podOfKey(key string) string {
	if i := strings.Index(key, " container="); i >= 0 {
		return key[:i]
	}
	return key
}

// LiveOutputs is what a live diff compares of a stage: its outputs
// (Outputs), but for the pod workers their pod statuses alone: a shadow pod
// worker says nothing of the node's readiness (the live replicas' agent
// readiness is the node's).
func LiveOutputs(node, stage string) (Filter, error) {
	out, err := Outputs(node, stage)
	if err != nil {
		return out, err
	}
	if stage == bus.StagePodworkers {
		delete(out.Subjects, bus.StreamState)
	}
	return out, nil
}

// shadowFilter is f with each subject moved under the stage's shadow
// prefix, in the shadow stream.
func shadowFilter(node, stage string, f Filter) Filter {
	live, shadow := bus.For(node).Prefix()+".", bus.For(node).Shadow(stage).Prefix()+"."
	var subjects []string
	for _, what := range streams {
		for _, subj := range f.Subjects[what] {
			subjects = append(subjects, shadow+strings.TrimPrefix(subj, live))
		}
	}
	return Filter{Subjects: map[string][]string{bus.StreamShadow: subjects}}
}

// Live compares what a stage publishes live with what its shadow
// (docs/bus.md, "Shadow stages") publishes on the same inputs, as they
// publish it, until ctx ends: per key, the latest item of each side (the
// items as Diff makes them, with the same fields left out). emit gets each
// key's first lasting difference and a summary every o.Every; Live
// returns the last summary.
func Live(ctx context.Context, js jetstream.JetStream, o LiveOptions, emit func(LiveEvent)) (LiveSummary, error) {
	out, err := LiveOutputs(o.Node, o.Stage)
	if err != nil {
		return LiveSummary{}, err
	}
	if o.Settle <= 0 {
		o.Settle = 5 * time.Second
	}
	if o.Every <= 0 {
		o.Every = 10 * time.Second
	}
	st := &liveState{settle: o.Settle, drop: dropSet(o.Ignore), keys: map[string]*liveKey{}, pods: map[string]bool{}}
	st.sum.Pods = []string{}
	type msg struct {
		sd side
		e  Entry
	}
	msgs := make(chan msg, 256)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	read := func(sd side, f Filter) {
		defer wg.Done()
		if err := follow(rctx, js, o.Node, f, o.Since, func(e Entry) {
			select {
			case msgs <- msg{sd, e}:
			case <-rctx.Done():
			}
		}); err != nil && rctx.Err() == nil {
			errs <- err
			cancel()
		}
	}
	wg.Add(2)
	go read(sideLive, out)
	go read(sideShadow, shadowFilter(o.Node, o.Stage, out))
	defer func() { cancel(); wg.Wait() }()
	tick := time.NewTicker(min(o.Settle/4, time.Second))
	defer tick.Stop()
	summary := time.NewTicker(o.Every)
	defer summary.Stop()
	report := func() {
		for _, d := range st.check(time.Now()) {
			emit(LiveEvent{Difference: &d})
		}
	}
	for {
		select {
		case m := <-msgs:
			st.add(m.sd, m.e)
		case <-tick.C:
			report()
		case <-summary.C:
			report()
			s := st.summary()
			emit(LiveEvent{Summary: &s})
		case <-rctx.Done():
			report()
			s := st.summary()
			select {
			case err := <-errs:
				return s, err
			default:
			}
			return s, nil
		}
	}
}

// follow reads the subjects of f from each of their streams, from since
// (zero: all the stream holds) and then live, until ctx ends.
func follow(ctx context.Context, js jetstream.JetStream, node string, f Filter, since time.Time, take func(Entry)) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(f.Subjects))
	for what, subjects := range f.Subjects {
		cfg := jetstream.OrderedConsumerConfig{FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverAllPolicy}
		if !since.IsZero() {
			cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
		}
		cons, err := js.OrderedConsumer(ctx, bus.StreamName(node, what), cfg)
		if err != nil {
			return fmt.Errorf("recording: stream %s: %w", bus.StreamName(node, what), err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				batch, err := cons.Fetch(100, jetstream.FetchMaxWait(time.Second))
				if err != nil {
					if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
						errs <- err
					}
					return
				}
				for m := range batch.Messages() {
					if md, err := m.Metadata(); err == nil {
						take(entryOf(what, m.Subject(), m.Headers(), m.Data(), md.Timestamp))
					}
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}
