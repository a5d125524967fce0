// Command statussync runs Splitlet's statussync stage alone.
package main

import (
	"github.com/splitlet/splitlet/libs/app"
	"github.com/splitlet/splitlet/services/statussync"
)

func main() { app.Main("statussync", statussync.Service()) }
