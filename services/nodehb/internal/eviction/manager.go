package eviction

import (
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Observation is one signal's figure: what is available of its capacity.
type Observation struct {
	Available int64
	Capacity  int64
}

// Observations are a round's figures, by signal; a signal the node cannot
// observe is absent, and its thresholds are never met.
type Observations map[Signal]Observation

// format is how a signal's quantities print (bytes in binary units,
// counts in decimal ones), as the kubelet's messages show them.
func format(s Signal) resource.Format {
	switch s.Resource() {
	case ResourceInodes, ResourcePIDs:
		return resource.DecimalSI
	}
	return resource.BinarySI
}

// isMet: the signal is below the threshold's amount, or with minReclaim
// below the amount plus the minimum reclaim (kubelet: thresholdsMet).
func isMet(t Threshold, obs Observations, minReclaim bool) bool {
	o, ok := obs[t.Signal]
	if !ok {
		return false
	}
	q := t.Value.Of(o.Capacity, format(t.Signal))
	if minReclaim && t.MinReclaim != nil {
		q.Add(*t.MinReclaim.Of(o.Capacity, format(t.Signal)))
	}
	return q.Cmp(*resource.NewQuantity(o.Available, format(t.Signal))) > 0
}

// State is the eviction manager's memory between rounds: when each
// threshold was first met, when each condition was last observed, and the
// thresholds that drove the last round (kept until their minimum reclaim is
// met too).
type State struct {
	thresholds    []Threshold
	transition    time.Duration
	firstObserved map[string]time.Time
	condObserved  map[corev1.NodeConditionType]time.Time
	lastMet       []Threshold
}

// NewState starts with no threshold met; transition is the pressure
// transition period (kubelet: evictionPressureTransitionPeriod).
func NewState(thresholds []Threshold, transition time.Duration) *State {
	return &State{thresholds: thresholds, transition: transition,
		firstObserved: map[string]time.Time{}, condObserved: map[corev1.NodeConditionType]time.Time{}}
}

// Round is what one observation decides.
type Round struct {
	// Conditions are the pressure conditions to report: observed within
	// the transition period.
	Conditions []corev1.NodeConditionType
	// Starved are the thresholds met for their grace period, memory first.
	Starved []Threshold
}

// Reclaim is the threshold whose resource the round reclaims, and whether
// there is one.
func (r Round) Reclaim() (Threshold, bool) {
	if len(r.Starved) == 0 {
		return Threshold{}, false
	}
	return r.Starved[0], true
}

// Observe runs one round of the kubelet's synchronize up to the choice of
// the resource to reclaim.
func (s *State) Observe(obs Observations, now time.Time) Round {
	var met []Threshold
	seen := map[string]bool{}
	add := func(t Threshold) {
		if !seen[t.key()] {
			seen[t.key()] = true
			met = append(met, t)
		}
	}
	for _, t := range s.thresholds {
		if isMet(t, obs, false) {
			add(t)
		}
	}
	// a threshold that drove eviction stays until its minimum reclaim is met.
	for _, t := range s.lastMet {
		if isMet(t, obs, true) {
			add(t)
		}
	}
	first := map[string]time.Time{}
	for _, t := range met {
		at, ok := s.firstObserved[t.key()]
		if !ok {
			at = now
		}
		first[t.key()] = at
	}
	s.firstObserved = first
	for _, t := range met {
		s.condObserved[t.Signal.Condition()] = now
	}
	var round Round
	for c, at := range s.condObserved {
		if now.Sub(at) < s.transition || at.Equal(now) {
			round.Conditions = append(round.Conditions, c)
		} else {
			delete(s.condObserved, c)
		}
	}
	sort.Slice(round.Conditions, func(i, j int) bool { return round.Conditions[i] < round.Conditions[j] })
	for _, t := range met {
		if now.Sub(first[t.key()]) >= t.GracePeriod {
			round.Starved = append(round.Starved, t)
		}
	}
	s.lastMet = round.Starved
	sort.SliceStable(round.Starved, func(i, j int) bool {
		return signalInfo[round.Starved[i].Signal].order < signalInfo[round.Starved[j].Signal].order
	})
	return round
}

// HasOnly: conds is c alone.
func HasOnly(conds []corev1.NodeConditionType, c corev1.NodeConditionType) bool {
	return len(conds) == 1 && conds[0] == c
}

// MetInfo is the threshold's amount and what is available, as the
// eviction message states them.
func MetInfo(t Threshold, obs Observations) (quantity, available *resource.Quantity, ok bool) {
	o, found := obs[t.Signal]
	if !found {
		return nil, nil, false
	}
	return t.Value.Of(o.Capacity, format(t.Signal)), resource.NewQuantity(o.Available, format(t.Signal)), true
}
