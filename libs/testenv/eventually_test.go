package testenv

import (
	"strings"
	"testing"
	"time"
)

func TestEventuallyReturnsOnceTrue(t *testing.T) {
	n := 0
	Eventually(t, time.Second, "the third call", func() (bool, string) { n++; return n == 3, "" })
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
}

// fatalRecorder records a Fatalf and ends the goroutine as testing.T does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = strings.TrimSpace(format)
	panic(f)
}

func TestEventuallyFailsAtTheDeadline(t *testing.T) {
	rec := &fatalRecorder{TB: t}
	func() {
		defer func() {
			if r := recover(); r != rec {
				t.Fatalf("want a Fatalf, got %v", r)
			}
		}()
		EventuallyTrue(rec, 50*time.Millisecond, "never", func() bool { return false })
	}()
	if !strings.Contains(rec.msg, "not within") {
		t.Fatalf("failure %q", rec.msg)
	}
}

// From a Cleanup, where the test's context has ended, Eventually still
// polls until its condition holds.
func TestEventuallyInCleanup(t *testing.T) {
	n := 0
	t.Run("sub", func(t *testing.T) {
		t.Cleanup(func() {
			Eventually(t, time.Second, "the third call", func() (bool, string) { n++; return n == 3, "" })
		})
	})
	if n != 3 {
		t.Fatalf("cond called %d times in a Cleanup, want 3", n)
	}
}
