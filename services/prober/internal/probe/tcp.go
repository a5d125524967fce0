package probe

import (
	"context"
	"net"
	"strconv"
	"time"
)

// TCP opens a connection to host:port within timeout and closes it again.
// A refused or timed-out connection is a Failure whose output says why.
func TCP(ctx context.Context, host string, port int, timeout time.Duration) (Result, string) {
	// No SO_LINGER: see dialer.
	d := net.Dialer{Timeout: timeout, KeepAlive: -1}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return Failure, err.Error()
	}
	_ = conn.Close()
	return Success, ""
}
