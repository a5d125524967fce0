package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// checkNATS is the health check of a nats-server whose monitoring port is
// off: it connects to the client port (host:port, or a nats:// or tls://
// URL), reads the INFO the server sends before any credential, requires
// JetStream on and, when the server requires TLS, completes the handshake
// verified with --ca. It uses no credential, and none is needed.
func checkNATS(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("check-nats", flag.ContinueOnError)
	caFile := fs.String("ca", "", "CA file that verifies the server's TLS certificate")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("want one address (host:port)")
	}
	addr := fs.Arg(0)
	if i := strings.Index(addr, "://"); i >= 0 {
		addr = addr[i+3:]
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	info, err := readInfo(conn)
	if err != nil {
		return fmt.Errorf("%s: %w", addr, err)
	}
	if !info.JetStream {
		return fmt.Errorf("%s (%s): JetStream is not enabled", addr, info.ServerName)
	}
	if !info.TLSRequired {
		return nil
	}
	return handshake(ctx, conn, addr, *caFile)
}

// natsInfo is what the check reads of the server's INFO.
type natsInfo struct {
	ServerName  string `json:"server_name"`
	JetStream   bool   `json:"jetstream"`
	TLSRequired bool   `json:"tls_required"`
}

func readInfo(conn net.Conn) (natsInfo, error) {
	line, err := bufio.NewReaderSize(conn, 4096).ReadString('\n')
	if err != nil {
		return natsInfo{}, fmt.Errorf("no INFO: %w", err)
	}
	body, ok := strings.CutPrefix(strings.TrimSpace(line), "INFO ")
	if !ok {
		return natsInfo{}, fmt.Errorf("not a NATS server: %q", line)
	}
	var info natsInfo
	if err := json.Unmarshal([]byte(body), &info); err != nil {
		return natsInfo{}, fmt.Errorf("INFO: %w", err)
	}
	return info, nil
}

// handshake completes the TLS handshake the server asked for, verifying
// its certificate for the address's host with the CA file.
func handshake(ctx context.Context, conn net.Conn, addr, caFile string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	cfg := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return err
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s: no certificate", caFile)
		}
	}
	if err := tls.Client(conn, cfg).HandshakeContext(ctx); err != nil {
		return fmt.Errorf("%s: TLS: %w", addr, err)
	}
	return nil
}
