// Command podworkers runs Splitlet's podworkers stage alone.
package main

import (
	"github.com/splitlet/splitlet/libs/app"
	"github.com/splitlet/splitlet/services/podworkers"
)

func main() { app.Main("podworkers", podworkers.Service()) }
