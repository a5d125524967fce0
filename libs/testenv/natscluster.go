package testenv

import (
	"crypto/tls"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATSCluster is a cluster of embedded nats-servers with JetStream on
// 127.0.0.1, for the replicated streams of nats-replicas. Its routes are
// authenticated and encrypted (NATSRoutes: TLS both ways with a route CA
// of their own, and a password); the monitoring port is off.
type NATSCluster struct {
	Servers []*server.Server
	// URLs of the servers' client ports, comma separated (a nats-url).
	URLs string
	// Routes are the route credentials; RoutePorts the servers' route ports.
	Routes     *NATSRoutes
	RoutePorts []int
	opts       []*server.Options
}

// StartNATSCluster starts n servers routed to each other, each with its
// store under dir, and waits until JetStream has a leader.
func StartNATSCluster(dir string, n int) (*NATSCluster, error) {
	creds, err := EnsureNATSRoutes(filepath.Join(dir, "routes"))
	if err != nil {
		return nil, err
	}
	clientPorts := make([]int, n)
	routePorts := make([]int, n)
	for i := 0; i < n; i++ {
		var err error
		if clientPorts[i], err = FreePort(); err != nil {
			return nil, err
		}
		if routePorts[i], err = FreePort(); err != nil {
			return nil, err
		}
	}
	var routes []*url.URL
	for _, p := range routePorts {
		routes = append(routes, creds.URL(fmt.Sprintf("127.0.0.1:%d", p)))
	}
	c := &NATSCluster{Routes: creds, RoutePorts: routePorts}
	var urls []string
	for i := 0; i < n; i++ {
		tlsConfig, err := creds.TLSConfig()
		if err != nil {
			return nil, err
		}
		o := &server.Options{
			ServerName: fmt.Sprintf("s%d", i+1),
			Host:       "127.0.0.1",
			Port:       clientPorts[i],
			JetStream:  true,
			StoreDir:   filepath.Join(dir, fmt.Sprintf("s%d", i+1)),
			NoSigs:     true,
			NoLog:      true,
			Routes:     routes,
			Cluster: server.ClusterOpts{
				Name:       "splitlet",
				Host:       "127.0.0.1",
				Port:       routePorts[i],
				Username:   NATSRouteUser,
				Password:   creds.Password,
				TLSConfig:  tlsConfig,
				TLSTimeout: 2,
			},
		}
		c.opts = append(c.opts, o)
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", clientPorts[i]))
	}
	c.URLs = strings.Join(urls, ",")
	for i := range c.opts {
		if err := c.start(i); err != nil {
			c.Stop()
			return nil, err
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ready := true
		for _, s := range c.Servers {
			if s == nil || !s.JetStreamIsCurrent() {
				ready = false
			}
		}
		if ready && c.hasLeader() {
			return c, nil
		}
		if time.Now().After(deadline) {
			c.Stop()
			return nil, fmt.Errorf("testenv: nats cluster of %d has no JetStream leader within 30s", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *NATSCluster) hasLeader() bool {
	for _, s := range c.Servers {
		if s != nil && s.JetStreamIsLeader() {
			return true
		}
	}
	return false
}

func (c *NATSCluster) start(i int) error {
	s, err := server.NewServer(c.opts[i])
	if err != nil {
		return err
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return errNotReady
	}
	for len(c.Servers) <= i {
		c.Servers = append(c.Servers, nil)
	}
	c.Servers[i] = s
	return nil
}

// StopServer shuts server i down (a lost server).
func (c *NATSCluster) StopServer(i int) {
	if s := c.Servers[i]; s != nil {
		s.Shutdown()
		s.WaitForShutdown()
		c.Servers[i] = nil
	}
}

// RestartServer starts server i again on its port and store.
func (c *NATSCluster) RestartServer(i int) error {
	c.StopServer(i)
	return c.start(i)
}

// Stop shuts every server down.
func (c *NATSCluster) Stop() {
	for i := range c.Servers {
		c.StopServer(i)
	}
}

// NATSClusterForTest starts a cluster of n for t, stopped when t ends.
func NATSClusterForTest(t testing.TB, n int) *NATSCluster {
	t.Helper()
	c, err := StartNATSCluster(t.TempDir(), n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// RoutedServerForTest starts a server of the cluster's name (splitlet) that
// routes to routeURL (its user and password, if any, are the route's) with
// the given TLS (nil: none), stopped when t ends: a test's stand-in for any
// local process that connects to a route port.
func RoutedServerForTest(t testing.TB, routeURL *url.URL, tlsConfig *tls.Config) *server.Server {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	o := &server.Options{
		ServerName: fmt.Sprintf("routed-%d", port),
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		// no JetStream: it joins no Raft group of the cluster.
		NoSigs:  true,
		NoLog:   true,
		Routes:  []*url.URL{routeURL},
		Cluster: server.ClusterOpts{Name: "splitlet", Host: "127.0.0.1", Port: port, TLSConfig: tlsConfig, TLSTimeout: 2},
	}
	if routeURL.User != nil {
		o.Cluster.Username = routeURL.User.Username()
		o.Cluster.Password, _ = routeURL.User.Password()
	}
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("routed server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}
