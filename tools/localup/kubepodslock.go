package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"syscall"
)

// kubepodsLockPath is the host-wide lock on the host's /kubepods cgroups
// between localup's runs: a kubelet whose cgroup root is the host's root
// kills the processes of every pod cgroup under /kubepods it does not
// know, so it holds the lock alone; Splitlet kills none and shares it.
var kubepodsLockPath = filepath.Join(os.TempDir(), "localup-kubepods.lock")

// lockKubepods takes the lock (exclusive for the kubelet), waiting for it
// and saying so once; the returned function releases it.
func lockKubepods(ctx context.Context, path string, exclusive bool, out io.Writer) (func(), error) {
	// Not through a symbolic link: the lock lives in a shared directory.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	said := false
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if err != syscall.EWOULDBLOCK {
			f.Close()
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if !said {
			fmt.Fprintf(out, "waiting for %s: another run's node agent uses the host's /kubepods cgroups, and a kubelet there kills the pods of any other agent there\n", path)
			said = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
