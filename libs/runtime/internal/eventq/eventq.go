// Package eventq is the unbounded queue behind a runtime's Events channel:
// producers (timers, process watchers) never block on a slow consumer, and
// one goroutine per runtime hands the events over in order.
package eventq

import (
	"sync"

	"github.com/splitlet/splitlet/libs/runtime"
)

// Queue buffers events until the consumer of C takes them.
type Queue struct {
	mu      sync.Mutex
	pending []runtime.Event
	wake    chan struct{}
	out     chan runtime.Event
	stop    chan struct{}
	done    chan struct{}
	closed  bool
}

// New starts a queue; Close stops it.
func New() *Queue {
	q := &Queue{
		wake: make(chan struct{}, 1),
		out:  make(chan runtime.Event),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	go q.run()
	return q
}

// C is the channel the consumer reads; it is closed by Close.
func (q *Queue) C() <-chan runtime.Event { return q.out }

// Push queues e; it never blocks. After Close it drops e.
func (q *Queue) Push(e runtime.Event) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.pending = append(q.pending, e)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Len is the number of events not yet taken.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

// Close stops the queue, drops what was not taken and closes C.
func (q *Queue) Close() {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		<-q.done
		return
	}
	q.closed = true
	q.mu.Unlock()
	close(q.stop)
	<-q.done
}

func (q *Queue) run() {
	defer close(q.done)
	defer close(q.out)
	for {
		q.mu.Lock()
		if len(q.pending) == 0 {
			q.mu.Unlock()
			select {
			case <-q.wake:
				continue
			case <-q.stop:
				return
			}
		}
		e := q.pending[0]
		q.pending[0] = runtime.Event{}
		q.pending = q.pending[1:]
		if len(q.pending) == 0 {
			q.pending = nil // let a large burst's backing array go
		}
		q.mu.Unlock()
		select {
		case q.out <- e:
		case <-q.stop:
			return
		}
	}
}
