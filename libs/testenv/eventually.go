package testenv

import (
	"testing"
	"time"
)

// PollInterval is Eventually's first wait between checks; the wait doubles
// up to MaxPollInterval, so that a condition that holds soon is seen soon
// and one that runs a command or an API call does not run back to back.
const (
	PollInterval    = 20 * time.Millisecond
	MaxPollInterval = 500 * time.Millisecond
)

// Eventually polls cond until it holds, failing t when timeout passes or
// the test's context ends first; the failure names what was awaited and
// the last state cond described. Called from a Cleanup, where the test's
// context has already ended, it is bound by timeout alone.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	done := t.Context().Done()
	select {
	case <-done:
		done = nil // in a Cleanup
	default:
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	wait := PollInterval
	for {
		ok, state := cond()
		if ok {
			return
		}
		tick := time.NewTimer(wait)
		select {
		case <-done:
			tick.Stop()
			t.Fatalf("%s: the test ended first (last: %s)", what, state)
		case <-deadline.C:
			tick.Stop()
			t.Fatalf("%s: not within %v (last: %s)", what, timeout, state)
		case <-tick.C:
		}
		wait = min(2*wait, MaxPollInterval)
	}
}

// EventuallyTrue is Eventually for a condition with no state to describe.
func EventuallyTrue(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Eventually(t, timeout, what, func() (bool, string) { return cond(), "false" })
}

// EventuallyNoError is Eventually for a check that returns nil once the
// condition holds and otherwise an error that describes the state.
func EventuallyNoError(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	Eventually(t, timeout, what, func() (bool, string) {
		if err := check(); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}
