// Command criimages builds the images the CRI runtime needs on a machine
// that reaches no registry, FROM scratch and without a Docker engine: busybox
// (the static /bin/busybox of Debian's busybox-static, with a link per
// applet) as docker.io/library/busybox:latest, and the sandbox ("pause")
// image as containerd's sandbox_image. It writes them as docker archives
// and, with --import, imports them into containerd's k8s.io namespace
// (`ctr images import`) of the containerd at --address. With --serve it
// readies a containerd for tests (.ci/run): the one at --address when it
// answers, else one started with its state, socket and log under --dir
// (testenv.EnsureContainerd), imports the images, prints "ready <socket>",
// and runs until SIGTERM or SIGINT, when it stops the containerd it started.
//
//	go run ./tools/criimages --out .splitlet/images                # archives only
//	go run ./tools/criimages --import                              # into /run/containerd/containerd.sock
//	criimages --serve --dir /tmp/splitlet-containerd               # what .ci/run does
//	criimages --serve --services-cni --address /run/splitlet-cluster/containerd.sock \
//	    --dir /run/splitlet-cluster                                 # pods on the network of compose.cluster.yaml
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/splitlet/splitlet/libs/testenv"
)

func main() {
	out := flag.String("out", ".splitlet/images", "directory the image archives are written to")
	doImport := flag.Bool("import", false, "import the archives into the containerd at --address")
	address := flag.String("address", testenv.DefaultContainerdAddress, "containerd socket")
	sandbox := flag.String("sandbox-image", testenv.PauseImage, "name of the sandbox image (containerd's sandbox_image)")
	serve := flag.Bool("serve", false, "ready a containerd (started under --dir when none answers at --address) with the images, and run until signalled")
	dir := flag.String("dir", "", "with --serve: where a started containerd keeps its state, socket and log")
	servicesCNI := flag.Bool("services-cni", false, "with --serve: a started containerd gives pods the network of the compose stack's cluster network (compose.cluster.yaml): bridge "+testenv.StackClusterBridge+" as their gateway, subnet "+testenv.StackClusterSubnet+", the Service range routed through it")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *serve {
		if *dir == "" {
			fail(fmt.Errorf("--serve needs --dir"))
		}
		opts := testenv.ContainerdOptions{Address: *address, Dir: *dir}
		if *servicesCNI {
			opts.CNIConfig = testenv.ServicesCNIConfig(testenv.StackClusterNetwork, testenv.StackClusterBridge, testenv.StackClusterSubnet)
		}
		cd, err := testenv.EnsureContainerd(ctx, opts)
		if err != nil {
			fail(err)
		}
		fmt.Printf("ready %s (started here: %v)\n", cd.Address, cd.Started)
		<-ctx.Done()
		cd.Stop()
		return
	}
	paths, err := testenv.BuildCRIImages(*out, *sandbox)
	if err != nil {
		fail(err)
	}
	for _, p := range paths {
		fmt.Println(p)
	}
	if !*doImport {
		return
	}
	cd := &testenv.Containerd{Address: *address, Endpoint: "unix://" + *address}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := cd.ImportImages(ictx, paths...); err != nil {
		fail(err)
	}
	if err := cd.WaitImages(ictx, testenv.BusyboxImage, *sandbox); err != nil {
		fail(err)
	}
	fmt.Printf("imported %s and %s into %s (namespace %s)\n", testenv.BusyboxImage, *sandbox, *address, testenv.ContainerdNamespace)
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "criimages: %v\n", err)
	os.Exit(1)
}
