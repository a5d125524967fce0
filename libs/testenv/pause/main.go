// Command pause is the process of a pod's sandbox container, the "pause"
// image the CRI runtime starts first in every pod: it holds the pod's
// namespaces open and does nothing else. When it is the pod's PID 1 (a
// shared process namespace) it reaps the orphans reparented to it; SIGTERM
// or SIGINT ends it. testenv builds it statically into the sandbox image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
