package probe

import (
	"context"
	"net"
	"testing"
	"time"
)

// BenchmarkTCP is the cost of one tcpSocket probe against a local listener.
func BenchmarkTCP(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = c.Read(make([]byte, 1)); _ = c.Close() }()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if r, out := TCP(ctx, "127.0.0.1", port, time.Second); r != Success {
			b.Fatalf("%v %s", r, out)
		}
	}
}
