// Command podconfig runs Splitlet's podconfig stage alone.
package main

import (
	"github.com/splitlet/splitlet/libs/app"
	"github.com/splitlet/splitlet/services/podconfig"
)

func main() { app.Main("podconfig", podconfig.Service()) }
