// Command nodehb runs Splitlet's nodehb stage alone.
package main

import (
	"github.com/splitlet/splitlet/libs/app"
	"github.com/splitlet/splitlet/services/nodehb"
)

func main() { app.Main("nodehb", nodehb.Service()) }
