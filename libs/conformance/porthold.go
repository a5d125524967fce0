package conformance

import (
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// portHold is a TCP socket bound to a port and not listening: the kernel
// refuses connections to the port and hands it to no other bind, while
// listeners with SO_REUSEPORT of this process can still share it.
type portHold struct {
	fd   int
	port int
}

// holdPort binds a socket to host:port (port 0: one the kernel picks).
func holdPort(host string, port int) (*portHold, error) {
	addr, err := net.ResolveTCPAddr("tcp", net.JoinHostPort(host, fmt.Sprint(port)))
	if err != nil {
		return nil, err
	}
	family, sa := unix.AF_INET, unix.Sockaddr(nil)
	if ip4 := addr.IP.To4(); ip4 != nil {
		sa = &unix.SockaddrInet4{Port: addr.Port, Addr: [4]byte(ip4)}
	} else {
		family, sa = unix.AF_INET6, &unix.SockaddrInet6{Port: addr.Port, Addr: [16]byte(addr.IP.To16())}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("SO_REUSEPORT: %w", err)
	}
	if err := unix.Bind(fd, sa); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("bind %s: %w", addr, err)
	}
	bound, err := unix.Getsockname(fd)
	if err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("getsockname: %w", err)
	}
	h := &portHold{fd: fd}
	switch b := bound.(type) {
	case *unix.SockaddrInet4:
		h.port = b.Port
	case *unix.SockaddrInet6:
		h.port = b.Port
	}
	return h, nil
}

func (h *portHold) close() { _ = unix.Close(h.fd) }

// reusePort sets SO_REUSEPORT on a listener's socket, so that it can share
// its port with a portHold.
func reusePort(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	}); err != nil {
		return err
	}
	return serr
}
