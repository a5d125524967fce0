// Command e2enc is the agnhost test image's nc. The real image's nc speaks
// UDP (the networking checks run `echo hostName | nc -w 1 -u <IP> <port>`
// against agnhost's UDP server and read its answer); Debian's busybox 1.35
// builds its nc without -u. e2enc takes the client forms the e2e suites
// use, `nc [-v] [-u|-t] [-w SEC] HOST PORT`, and hands every other form
// (listening, -e, -U, ...) to busybox's nc.
package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const busybox = "/bin/busybox"

func main() {
	c, ok := parse(os.Args[1:])
	if !ok {
		err := syscall.Exec(busybox, append([]string{"nc"}, os.Args[1:]...), os.Environ())
		fmt.Fprintf(os.Stderr, "nc: exec %s: %v\n", busybox, err)
		os.Exit(127)
	}
	if err := c.run(os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "nc: %v\n", err)
		os.Exit(1)
	}
}

// client is one client-mode invocation.
type client struct {
	udp     bool
	verbose bool
	// wait: the connect timeout and, once stdin has ended, how long the
	// connection may stay idle before nc exits; 0 waits for the peer.
	wait       time.Duration
	host, port string
}

// parse reads the client form; ok is false for any other.
func parse(args []string) (c client, ok bool) {
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			rest = append(rest, a)
			continue
		}
		for j := 1; j < len(a); j++ {
			switch a[j] {
			case 'u':
				c.udp = true
			case 't':
				c.udp = false
			case 'v':
				c.verbose = true
			case 'w':
				val := a[j+1:]
				if val == "" {
					if i+1 >= len(args) {
						return client{}, false
					}
					i++
					val = args[i]
				}
				secs, err := strconv.Atoi(val)
				if err != nil || secs < 0 {
					return client{}, false
				}
				c.wait = time.Duration(secs) * time.Second
				j = len(a)
			default:
				return client{}, false
			}
		}
	}
	if len(rest) != 2 {
		return client{}, false
	}
	c.host, c.port = rest[0], rest[1]
	return c, true
}

// run connects, sends stdin (each read one datagram over UDP) and copies
// what comes back to stdout until the peer closes or, after stdin ended,
// the connection was idle for c.wait.
func (c client) run(stdin io.Reader, stdout, stderr io.Writer) error {
	network := map[bool]string{true: "udp", false: "tcp"}[c.udp]
	conn, err := net.DialTimeout(network, net.JoinHostPort(c.host, c.port), c.wait)
	if err != nil {
		return fmt.Errorf("can't connect to remote host (%s): %w", c.host, unwrap(err))
	}
	defer conn.Close()
	if c.verbose {
		fmt.Fprintf(stderr, "Connection to %s %s port [%s/*] succeeded!\n", c.host, c.port, network)
	}
	stdinDone := make(chan struct{})
	go func() {
		c.send(stdin, conn)
		close(stdinDone)
	}()
	return c.receive(conn, stdout, stdinDone)
}

// send copies stdin to the connection and, over TCP, half-closes it at
// stdin's end so that the peer sees it.
func (c client) send(stdin io.Reader, conn net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := stdin.Read(buf)
		if n > 0 {
			if _, werr := conn.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			break
		}
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.CloseWrite()
	}
}

// receive copies the connection to stdout. Until stdin ends it waits
// without limit; after, each read waits at most c.wait (if set).
func (c client) receive(conn net.Conn, stdout io.Writer, stdinDone <-chan struct{}) error {
	buf := make([]byte, 64<<10)
	poll := c.wait
	if poll == 0 {
		poll = time.Second
	}
	for {
		ended := closed(stdinDone)
		_ = conn.SetReadDeadline(time.Now().Add(poll))
		n, err := conn.Read(buf)
		if n > 0 {
			if _, werr := stdout.Write(buf[:n]); werr != nil {
				return werr
			}
			continue
		}
		var ne net.Error
		switch {
		case err == nil:
		case errors.As(err, &ne) && ne.Timeout():
			// a whole wait with stdin already ended
			if c.wait > 0 && ended {
				return nil
			}
		case errors.Is(err, io.EOF):
			return nil
		default:
			return unwrap(err)
		}
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// unwrap keeps the system's words ("Connection refused") of a network
// error, as busybox prints them.
func unwrap(err error) error {
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err
	}
	return err
}
