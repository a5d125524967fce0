package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/splitlet/splitlet/libs/testenv"
)

// clusterNetOptions are cluster-network's flags.
type clusterNetOptions struct {
	stateDir, url, dir string
	net                testenv.ClusterNetworkOptions
}

func parseClusterNet(args []string) (clusterNetOptions, error) {
	var o clusterNetOptions
	fs := flag.NewFlagSet("cluster-network", flag.ContinueOnError)
	fs.StringVar(&o.stateDir, "state-dir", "/state", "the state directory of `controlplane run` (its CA and admin token, under controlplane/)")
	fs.StringVar(&o.url, "url", "https://127.0.0.1:16443", "kube-apiserver's URL")
	fs.StringVar(&o.dir, "dir", "/var/lib/clusternet", "the Corefile, the kubeconfigs of CoreDNS and kube-proxy, their logs and the ready file")
	fs.StringVar(&o.net.Bridge, "bridge", "", "the pods' CNI bridge (its gateway is where CoreDNS listens)")
	fs.StringVar(&o.net.Subnet, "subnet", "", "the pods' subnet on the bridge (IPv4 CIDR); its first address is the gateway")
	fs.StringVar(&o.net.Node, "node-name", "", "the node kube-proxy runs for")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if o.net.Bridge == "" || o.net.Subnet == "" || o.net.Node == "" {
		return o, errors.New("--bridge, --subnet and --node-name are needed")
	}
	o.net.Dir = o.dir
	return o, nil
}

// readyFile is in --dir while CoreDNS and kube-proxy run and are ready:
// the health check of `controlplane cluster-network`.
const readyFile = "ready"

// clusterNetCmd runs the cluster network of the compose stack's node
// (testenv.StartClusterNetwork: the bridge's gateway and the Service
// range's blackhole route on the host, the kube-dns Service, CoreDNS and
// kube-proxy), with the control plane's CA and admin token from the state
// directory, until a signal or one of them exits; then it undoes it all
// (kube-proxy's rules, the route, the bridge if it made it).
func clusterNetCmd(ctx context.Context, args []string, out io.Writer) error {
	o, err := parseClusterNet(args)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := os.Setenv(testenv.BinDirEnv, filepath.Dir(self)); err != nil {
		return err
	}
	ready := filepath.Join(o.dir, readyFile)
	if err := os.Remove(ready); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	cp, err := testenv.OpenControlPlane(filepath.Join(o.stateDir, "controlplane"), o.url)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "controlplane: cluster network for node %s on bridge %s (%s)\n", o.net.Node, o.net.Bridge, o.net.Subnet)
	n, err := testenv.StartClusterNetwork(ctx, cp, o.net)
	if err != nil {
		return err
	}
	defer n.Stop()
	followCtx, stopFollow := context.WithCancel(ctx)
	defer stopFollow()
	for _, log := range []string{"coredns.log", "kube-proxy.log"} {
		go follow(followCtx, filepath.Join(o.dir, log), out)
	}
	if err := writeFile(ready, nil, 0o644); err != nil {
		return err
	}
	defer os.Remove(ready)
	fmt.Fprintf(out, "controlplane: CoreDNS on %s:53 (kube-dns %s), kube-proxy running\n", n.Gateway, n.DNS)
	return watchRunning(ctx, out, n.Running, "controlplane: stopping the cluster network", errors.New("CoreDNS or kube-proxy exited"))
}

// checkFileCmd is check-file: exit 0 when the file exists.
func checkFileCmd(args []string) error {
	if len(args) != 1 {
		return errors.New("want one path")
	}
	_, err := os.Stat(args[0])
	return err
}
