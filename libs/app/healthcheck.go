package app

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/splitlet/splitlet/libs/config"
)

// HTTPAddrFile is where a process writes the bound address of its health
// server: <data-dir>/<binary>.http-addr. With http-addr on port 0 (the
// default, so that replicas on one network never collide) it is how
// `<binary> --healthcheck` finds the port.
func HTTPAddrFile(c *config.Common, binary string) string {
	return filepath.Join(c.DataDir, binary+".http-addr")
}

// checkHealth is --healthcheck: GET /readyz of the running process.
func checkHealth(ctx context.Context, binary string, c *config.Common, stderr io.Writer) int {
	addr, err := healthAddr(c, binary)
	if err != nil {
		fmt.Fprintf(stderr, "%s: healthcheck: %v\n", binary, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
	if err != nil {
		fmt.Fprintf(stderr, "%s: healthcheck: %v\n", binary, err)
		return 1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "%s: healthcheck: %v\n", binary, err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "%s: healthcheck: /readyz at %s: %s\n%s", binary, addr, resp.Status, body)
		return 1
	}
	return 0
}

// healthAddr is http-addr when its port is fixed, else the address the
// running process wrote to HTTPAddrFile; an unspecified host becomes 127.0.0.1.
func healthAddr(c *config.Common, binary string) (string, error) {
	addr := c.HTTPAddr
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "0" {
		data, err := os.ReadFile(HTTPAddrFile(c, binary))
		if err != nil {
			return "", fmt.Errorf("http-addr has no fixed port and the process has not written its address: %w", err)
		}
		addr = strings.TrimSpace(string(data))
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("bad health address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}
