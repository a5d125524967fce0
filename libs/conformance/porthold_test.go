package conformance

import (
	"fmt"
	"net"
	"testing"
	"time"
)

// A closed port refuses connections and cannot be taken by another
// listener until it is reopened; reopened, it accepts again.
func TestClosedPortIsHeld(t *testing.T) {
	l := closedPort(t, "127.0.0.1")
	addr := net.JoinHostPort("127.0.0.1", fmt.Sprint(l.port))
	refused := func(what string) {
		t.Helper()
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = c.Close()
			t.Fatalf("%s: a connection to %s was accepted", what, addr)
		}
		if other, err := net.Listen("tcp", addr); err == nil {
			_ = other.Close()
			t.Fatalf("%s: another listener took port %d", what, l.port)
		}
	}
	refused("closedPort")
	l.reopen(t)
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatalf("reopened port refuses: %v", err)
	}
	_ = c.Close()
	l.close(t)
	refused("closed again")
}
