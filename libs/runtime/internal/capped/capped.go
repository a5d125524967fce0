// Package capped is the output buffer of a runtime's Exec: it keeps the
// first Limit bytes written to it and drops the rest, so that a chatty
// command can neither exhaust memory nor block on a full pipe.
package capped

import "sync"

// Limit bounds what Exec keeps of each stream (and reads of stdin).
const Limit = 16 << 20

// Buffer is safe for concurrent writers; the zero value is ready.
type Buffer struct {
	mu  sync.Mutex
	buf []byte
}

// Write keeps what fits under Limit and reports everything written.
func (c *Buffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := Limit - len(c.buf); room > 0 {
		c.buf = append(c.buf, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

// Bytes is what was kept.
func (c *Buffer) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf
}
