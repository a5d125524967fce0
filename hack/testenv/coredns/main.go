// Command coredns is CoreDNS with only the plugins a test cluster's DNS
// needs: Services and pods from the API server (kubernetes), static names
// (hosts), health and readiness endpoints, a cache, and errors and queries
// in the log. There is no forward plugin: a name outside the cluster's
// zones is refused, and no query leaves the machine.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	// The plugins named in directives, each registering itself.
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

// directives are the plugins in the order CoreDNS's own list runs them.
var directives = []string{
	"bind",
	"ready",
	"health",
	"errors",
	"log",
	"cache",
	"hosts",
	"kubernetes",
}

func main() {
	dnsserver.Directives = directives
	coremain.Run()
}
