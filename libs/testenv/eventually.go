package testenv

import (
	"testing"
	"time"
)

// PollInterval is how often Eventually checks its condition.
const PollInterval = 20 * time.Millisecond

// Eventually polls cond until it holds, failing t when timeout passes or
// the test's context ends first; the failure names what was awaited and
// the last state cond described.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	ctx := t.Context()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for {
		ok, state := cond()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: the test ended first (last: %s)", what, state)
		case <-deadline.C:
			t.Fatalf("%s: not within %v (last: %s)", what, timeout, state)
		case <-tick.C:
		}
	}
}

// EventuallyTrue is Eventually for a condition with no state to describe.
func EventuallyTrue(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Eventually(t, timeout, what, func() (bool, string) { return cond(), "false" })
}
