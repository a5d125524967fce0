package testenv_test

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/splitlet/splitlet/libs/testenv"
)

// A cluster's routes are authenticated and encrypted: a server that
// connects to a route port without the route CA's certificate or without
// the password is refused (a route would bypass every client permission),
// and one with both joins.
func TestNATSClusterRoutesNeedCredentials(t *testing.T) {
	c := testenv.NATSClusterForTest(t, 3)
	route := fmt.Sprintf("127.0.0.1:%d", c.RoutePorts[0])
	good, err := c.Routes.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	other, err := testenv.EnsureNATSRoutes(t.TempDir()) // another CA, another password
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	noPassword := c.Routes.URL(route)
	noPassword.User = nil
	refused := map[string]*server.Server{
		"no TLS, no password":            testenv.RoutedServerForTest(t, &url.URL{Scheme: "nats-route", Host: route}, nil),
		"the password, another CA's TLS": testenv.RoutedServerForTest(t, c.Routes.URL(route), foreign),
		"the route TLS, no password":     testenv.RoutedServerForTest(t, noPassword, good),
	}
	// a server with both routes: the others had as long to do so.
	goodTLS, err := c.Routes.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	joined := testenv.RoutedServerForTest(t, c.Routes.URL(route), goodTLS)
	testenv.EventuallyTrue(t, 20*time.Second, "a server with the route credentials joined", func() bool { return joined.NumRoutes() > 0 })
	for what, s := range refused {
		if n := s.NumRoutes(); n != 0 {
			t.Errorf("a route with %s was accepted (%d routes)", what, n)
		}
	}
}
