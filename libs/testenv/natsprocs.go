package testenv

import (
	"fmt"
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
// in t's temporary directory), killed when t ends. It needs bin/nats-server
// (make nats-server) and is skipped under -short.
func NATSProcessClusterForTest(t testing.TB, n int) *NATSProcessCluster {
	t.Helper()
	SkipShort(t, "bin/nats-server processes")
	bin, err := Binary("nats-server")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	clients, routes := make([]int, n), make([]string, n)
	for i := range n {
		if clients[i], err = FreePort(); err != nil {
			t.Fatal(err)
		}
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", port)
	}
	c := &NATSProcessCluster{}
	t.Cleanup(c.stop)
	for i := range n {
		conf := fmt.Sprintf("server_name: s%d\nlisten: 127.0.0.1:%d\njetstream { store_dir: %q }\n"+
			"cluster { name: splitlet, listen: %q, routes: [%s] }\n",
			i+1, clients[i], filepath.Join(dir, fmt.Sprintf("s%d", i+1)), strings.TrimPrefix(routes[i], "nats-route://"), strings.Join(routes, ", "))
		path := filepath.Join(dir, fmt.Sprintf("s%d.conf", i+1))
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		p, err := startProcess(fmt.Sprintf("nats-server s%d", i+1), filepath.Join(dir, fmt.Sprintf("s%d.log", i+1)), bin, "-c", path)
		if err != nil {
			t.Fatal(err)
		}
		c.procs = append(c.procs, p)
		c.URLs = append(c.URLs, fmt.Sprintf("nats://127.0.0.1:%d", clients[i]))
	}
	return c
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
