package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// NATSProcessCluster is a cluster of nats-server processes (bin/nats-server)
// with JetStream on 127.0.0.1, routed in the clear. Unlike NATSCluster's
// embedded servers, one can be killed outright (SIGKILL): it says goodbye
// to no one, as a crashed host or `docker kill` does, so the others learn
// of the loss only when it stops answering.
type NATSProcessCluster struct {
	// URLs are the servers' client URLs, in server order.
	URLs  []string
	procs []*process
}

// NATSProcessClusterForTest starts n servers for t (their logs and stores
// in t's temporary directory) and waits until each takes clients; they are
// killed when t ends. It needs bin/nats-server (make nats-server) and is
// skipped under -short.
func NATSProcessClusterForTest(t testing.TB, n int) *NATSProcessCluster {
	t.Helper()
	SkipShort(t, "bin/nats-server processes")
	bin, err := Binary("nats-server")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var c *NATSProcessCluster
	err = onFreePorts(func() error {
		var err error
		c, err = startNATSProcesses(bin, dir, n)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.stop)
	return c
}

// startNATSProcesses starts n routed servers on ports FreePort picks and
// waits for each to listen; on a failure it stops those it started.
func startNATSProcesses(bin, dir string, n int) (*NATSProcessCluster, error) {
	clients, routes := make([]string, n), make([]string, n)
	for i := range n {
		for _, hp := range []*string{&clients[i], &routes[i]} {
			port, err := FreePort()
			if err != nil {
				return nil, err
			}
			*hp = fmt.Sprintf("127.0.0.1:%d", port)
		}
	}
	routeURLs := make([]string, n)
	for i, r := range routes {
		routeURLs[i] = "nats-route://" + r
	}
	c := &NATSProcessCluster{}
	for i := range n {
		name := fmt.Sprintf("s%d", i+1)
		conf := fmt.Sprintf("server_name: %s\nlisten: %s\njetstream { store_dir: %q }\ncluster { name: splitlet, listen: %q, routes: [%s] }\n",
			name, clients[i], filepath.Join(dir, name), routes[i], strings.Join(routeURLs, ", "))
		path := filepath.Join(dir, name+".conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			c.stop()
			return nil, err
		}
		p, err := startProcess("nats-server "+name, filepath.Join(dir, name+".log"), bin, "-c", path)
		if err != nil {
			c.stop()
			return nil, err
		}
		c.procs = append(c.procs, p)
		c.URLs = append(c.URLs, "nats://"+clients[i])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, p := range c.procs {
		err := p.waitFor(ctx, "taking clients", func() error {
			conn, err := net.DialTimeout("tcp", clients[i], time.Second)
			if err == nil {
				conn.Close()
			}
			return err
		})
		if err != nil {
			c.stop()
			return nil, err
		}
	}
	return c, nil
}

// Kill ends server i with SIGKILL and waits for it to be gone.
func (c *NATSProcessCluster) Kill(i int) {
	p := c.procs[i]
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (c *NATSProcessCluster) stop() {
	for _, p := range c.procs {
		p.stop(5 * time.Second)
	}
}
