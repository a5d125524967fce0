// Command splitlet runs any set of Splitlet's services in one process:
// --services=all (the default) or a list such as --services=podconfig,statussync.
// With --nats-url empty it embeds its own NATS server.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/splitlet/splitlet/libs/app"
	"github.com/splitlet/splitlet/services/nodehb"
	"github.com/splitlet/splitlet/services/podconfig"
	"github.com/splitlet/splitlet/services/podworkers"
	"github.com/splitlet/splitlet/services/prober"
	"github.com/splitlet/splitlet/services/statussync"
)

// Services are the stages in the order they start (and stop in reverse).
func Services() []app.Service {
	return []app.Service{
		podconfig.Service(),
		podworkers.Service(),
		prober.Service(),
		statussync.Service(),
		nodehb.Service(),
	}
}

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "bus" || os.Args[1] == "status") {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		run := runBus
		if os.Args[1] == "status" {
			run = runStatus
		}
		code := run(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	app.Main("splitlet", Services()...)
}
