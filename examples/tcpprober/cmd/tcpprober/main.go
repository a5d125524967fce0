// Command tcpprober runs the TCP-only prober stage (examples/tcpprober) in
// place of Splitlet's prober. It takes the common keys of every Splitlet
// binary (--nats-url, --node-name, --partitions, ...).
package main

import (
	"github.com/splitlet/splitlet/examples/tcpprober"
	"github.com/splitlet/splitlet/libs/app"
)

func main() { app.Main("tcpprober", tcpprober.Service()) }
