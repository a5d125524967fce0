package process

import (
	"os/exec"
	goruntime "runtime"
	"sync"
)

// Pdeathsig is tied to the thread that forked the child, not to the
// process: if that thread ends, the child is killed. Go may end a thread
// (one a goroutine locked and did not unlock), so every child is started
// from one goroutine locked to its thread for the life of the process.

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	spawnOnce sync.Once
	spawns    chan spawnRequest
)

// start starts cmd from the spawner thread.
func start(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawns = make(chan spawnRequest)
		go func() {
			goruntime.LockOSThread()
			// Never unlocked and never returns: the thread lives as long as
			// the process.
			for req := range spawns {
				req.done <- req.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawns <- spawnRequest{cmd: cmd, done: done}
	return <-done
}
