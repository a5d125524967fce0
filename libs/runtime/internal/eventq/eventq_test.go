package eventq

import (
	"strconv"
	"testing"
	"time"

	"github.com/splitlet/splitlet/libs/runtime"
)

func TestOrderWithoutBlocking(t *testing.T) {
	q := New()
	const n = 10000
	// Nobody reads yet: Push must not block.
	for i := range n {
		q.Push(runtime.Event{ContainerID: strconv.Itoa(i)})
	}
	for i := range n {
		select {
		case ev := <-q.C():
			if ev.ContainerID != strconv.Itoa(i) {
				t.Fatalf("event %d is %q", i, ev.ContainerID)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("event %d not delivered", i)
		}
	}
	q.Push(runtime.Event{ContainerID: "x"})
	q.Close()
	for range q.C() {
		// A last event may or may not be delivered; the channel closes.
	}
	q.Push(runtime.Event{ContainerID: "after close"})
	q.Close()
}
