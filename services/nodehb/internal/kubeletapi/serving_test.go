package kubeletapi

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// With GetCertificate the kubelet API serves the pair it gives at each
// handshake: a renewed pair reaches the next connection at once, a
// connection opened before keeps serving, and before any pair exists no
// handshake succeeds.
func TestServingCertificateRenewedInPlace(t *testing.T) {
	var cur atomic.Pointer[tls.Certificate]
	s, err := New(Config{Node: "n", Addr: "127.0.0.1:0", Partitions: 1, Authorizer: AlwaysAllow{}, Anonymous: true,
		GetCertificate: cur.Load})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	dial := func() (*tls.Conn, error) {
		return tls.Dial("tcp", s.Addr(), &tls.Config{InsecureSkipVerify: true})
	}
	if c, err := dial(); err == nil {
		c.Close()
		t.Fatal("a handshake succeeded before any serving certificate was issued")
	}
	pair := func(serial int64) *tls.Certificate {
		c, err := selfSigned(fmt.Sprintf("n%d", serial), []string{"n"}, []net.IP{net.ParseIP("127.0.0.1")})
		if err != nil {
			t.Fatal(err)
		}
		c.Leaf, _ = x509.ParseCertificate(c.Certificate[0])
		return &c
	}
	first := pair(1)
	cur.Store(first)
	old, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	r := bufio.NewReader(old)
	get := func() error {
		_ = old.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := fmt.Fprint(old, "GET /healthz HTTP/1.1\r\nHost: n\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	if err := get(); err != nil {
		t.Fatal(err)
	}
	renewed := pair(2)
	cur.Store(renewed)
	c, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	got := c.ConnectionState().PeerCertificates[0]
	c.Close()
	if !got.Equal(renewed.Leaf) {
		t.Errorf("a new connection was served %s, want the renewed pair", got.Subject.CommonName)
	}
	if err := get(); err != nil {
		t.Errorf("the connection opened before the renewal: %v", err)
	}
}
