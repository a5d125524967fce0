// Command prober runs Splitlet's prober stage alone.
package main

import (
	"github.com/splitlet/splitlet/libs/app"
	"github.com/splitlet/splitlet/services/prober"
)

func main() { app.Main("prober", prober.Service()) }
