package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/splitlet/splitlet/libs/testenv"
)

// criRuntime readies `make run RUNTIME=cri`: the containerd that answers at
// /run/containerd/containerd.sock, or one started with its state under
// <state>/containerd when none does (root only), with the busybox and
// sandbox images imported (nothing is pulled); opts may name another
// containerd or another CNI network. It returns the CRI endpoint (the
// node agent's) and what undoes it (a containerd started here is stopped,
// its pods removed). Other runtimes need nothing (no endpoint).
func criRuntime(ctx context.Context, runtime, state string, opts testenv.ContainerdOptions, out io.Writer) (string, func(), error) {
	if runtime != "cri" {
		return "", func() {}, nil
	}
	fmt.Fprintln(out, "readying containerd and the busybox and pause images ...")
	if opts.Dir == "" {
		opts.Dir = filepath.Join(state, "containerd")
	}
	cd, err := testenv.EnsureContainerd(ctx, opts)
	if err != nil {
		return "", nil, err
	}
	if cd.Started {
		fmt.Fprintf(out, "started containerd on %s (log: %s)\n", cd.Address, filepath.Join(cd.Dir, "containerd.log"))
	} else {
		fmt.Fprintf(out, "using the containerd on %s\n", cd.Address)
	}
	return cd.Endpoint, func() {
		if cd.Started {
			fmt.Fprintln(out, "stopping containerd ...")
		}
		cd.Stop()
	}, nil
}
