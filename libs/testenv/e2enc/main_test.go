package main

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// The client forms the e2e suites use are e2enc's own; the rest go to
// busybox.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		args string
		ok   bool
		want client
	}{
		{"-w 1 -u 10.90.0.7 8081", true, client{udp: true, wait: time.Second, host: "10.90.0.7", port: "8081"}},
		{"-v -u -w 2 10.0.0.1 90", true, client{udp: true, verbose: true, wait: 2 * time.Second, host: "10.0.0.1", port: "90"}},
		{"-v -t -w2 10.0.0.1 90", true, client{verbose: true, wait: 2 * time.Second, host: "10.0.0.1", port: "90"}},
		{"-vu 10.0.0.1 90", true, client{udp: true, verbose: true, host: "10.0.0.1", port: "90"}},
		{"-lU /mnt/asocket", false, client{}},
		{"-l -p 8080", false, client{}},
		{"-e /bin/sh 10.0.0.1 90", false, client{}},
		{"-w x 10.0.0.1 90", false, client{}},
		{"-u 10.0.0.1", false, client{}},
		{"-w", false, client{}},
	} {
		got, ok := parse(strings.Fields(c.args))
		if ok != c.ok || got != c.want {
			t.Errorf("%q: %+v %v, want %+v %v", c.args, got, ok, c.want, c.ok)
		}
	}
}

// `echo hostName | nc -w 1 -u IP PORT` prints the datagram agnhost's UDP
// server answers with, and ends a second after stdin did.
func TestUDPAnswer(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 1024)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if strings.TrimSpace(string(buf[:n])) == "hostName" {
				_, _ = pc.WriteTo([]byte("netserver-0"), from)
			}
		}
	}()
	host, port, _ := net.SplitHostPort(pc.LocalAddr().String())
	var out bytes.Buffer
	c := client{udp: true, wait: time.Second, host: host, port: port}
	if err := c.run(strings.NewReader("hostName\n"), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if out.String() != "netserver-0" {
		t.Errorf("printed %q, want the answer netserver-0", out.String())
	}
}

// Nothing listening: the port's refusal is an error, as busybox's nc exits
// non-zero with the system's words.
func TestUDPRefused(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(pc.LocalAddr().String())
	pc.Close()
	c := client{udp: true, wait: time.Second, host: host, port: port}
	var out bytes.Buffer
	err = c.run(strings.NewReader("hostName\n"), &out, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "connection refused") || out.Len() != 0 {
		t.Errorf("got %v and %q, want connection refused and nothing printed", err, out.String())
	}
}

// Over TCP stdin's end half-closes the connection, and the peer's answer
// is printed up to its close.
func TestTCPAnswer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		got, _ := io.ReadAll(conn)
		_, _ = conn.Write([]byte("got " + string(got)))
	}()
	host, port, _ := net.SplitHostPort(l.Addr().String())
	var out, verbose bytes.Buffer
	c := client{verbose: true, wait: 2 * time.Second, host: host, port: port}
	if err := c.run(strings.NewReader("hostName\n"), &out, &verbose); err != nil {
		t.Fatal(err)
	}
	if out.String() != "got hostName\n" || !strings.Contains(verbose.String(), "succeeded") {
		t.Errorf("printed %q, said %q", out.String(), verbose.String())
	}
}
