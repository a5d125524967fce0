// Command stack runs the compose stack of deploy/compose without the docker
// compose CLI (Debian's docker.io has none): it drives the same files through
// the compose library that the end-to-end tests use. `make up`, `make down`.
//
//	go run ./e2e/cmd/stack up [--podworkers=N] [--tcpprober | --jsprober | --allinone] [--shadow=prober:jsprober] [--cri [--cluster]] [--nats-cluster] [--tracing]
//	go run ./e2e/cmd/stack down
//
// With the docker compose CLI (v2.20 or later) the same files work directly;
// README.md shows both.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	tccompose "github.com/testcontainers/testcontainers-go/modules/compose"

	"github.com/splitlet/splitlet/libs/testenv"
)

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "up" && os.Args[1] != "down") {
		fmt.Fprintln(os.Stderr, "usage: stack up [--podworkers=N] [--tcpprober | --jsprober | --allinone] [--shadow=prober:jsprober|prober:tcpprober] [--cri [--cluster]] [--nats-cluster] [--tracing] | stack down")
		os.Exit(2)
	}
	cmd := os.Args[1]
	f := parseFlags(cmd, os.Args[2:])
	shadowFile, err := f.check()
	if err != nil {
		fmt.Fprintf(os.Stderr, "stack: %v\n", err)
		os.Exit(2)
	}
	// No reaper container: it would have to be pulled; `stack down` cleans up.
	_ = os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	files := f.composeFiles(cmd, shadowFile)
	if f.cluster || cmd == "down" {
		// the host's cluster network lock, which cluster-network holds
		// (a bind mount of a file: it must exist).
		if err := touch(clusterNetLock); err != nil {
			fmt.Fprintf(os.Stderr, "stack: %v\n", err)
			os.Exit(1)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cmd == "up" {
		f.prepareUp(ctx)
	}
	if err := run(ctx, cmd, f.project, files, f.podworkers, f.timeout, f.dir); err != nil {
		fmt.Fprintf(os.Stderr, "stack %s: %v\n", cmd, err)
		os.Exit(1)
	}
}

// stackFlags are the command line's flags.
type stackFlags struct {
	dir, project, shadow                            string
	podworkers                                      int
	tcpprober, jsprober, allinone, cri, natsCluster bool
	cluster, tracing                                bool
	timeout                                         time.Duration
}

// parseFlags parses the flags of cmd (up or down); a bad flag exits.
func parseFlags(cmd string, args []string) *stackFlags {
	f := &stackFlags{}
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	fs.StringVar(&f.dir, "dir", defaultDir(), "the compose directory (deploy/compose)")
	fs.StringVar(&f.project, "project", "splitlet", "compose project name")
	fs.IntVar(&f.podworkers, "podworkers", 1, "podworkers replicas (up)")
	fs.BoolVar(&f.tcpprober, "tcpprober", false, "swap the prober for examples/tcpprober (compose.tcpprober.yaml)")
	fs.BoolVar(&f.jsprober, "jsprober", false, "swap the prober for examples/jsprober, in JavaScript on Node.js (compose.jsprober.yaml)")
	fs.BoolVar(&f.allinone, "allinone", false, "the all-in-one binary instead of the five stages (compose.allinone.yaml)")
	fs.BoolVar(&f.cri, "cri", false, "pods as real containers of the host's containerd (compose.cri.yaml; containerd at $SPLITLET_CONTAINERD_ADDRESS or /run/containerd/containerd.sock)")
	fs.BoolVar(&f.cluster, "cluster", false, "with --cri: cluster DNS (CoreDNS) and Services (kube-proxy) for the pods (compose.cluster.yaml; the containerd's pods on the network criimages --serve --services-cni gives them)")
	fs.BoolVar(&f.natsCluster, "nats-cluster", false, "NATS as a three-server cluster, streams at three replicas (compose.natscluster.yaml)")
	fs.StringVar(&f.shadow, "shadow", "", "run a candidate as a shadow of a live stage, <stage>:<candidate>: prober:jsprober or prober:tcpprober (compose.shadow-<candidate>.yaml; docs/experiments.md)")
	fs.BoolVar(&f.tracing, "tracing", false, "Jaeger, and every stage and kube-apiserver sending it spans (compose.tracing.yaml; builds splitlet/jaeger with make image-jaeger when missing)")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Minute, "how long up may wait for every service to be healthy")
	_ = fs.Parse(args)
	return f
}

// check refuses flags that exclude each other and returns the --shadow
// overlay's file.
func (f *stackFlags) check() (string, error) {
	if n := btoi(f.tcpprober) + btoi(f.jsprober) + btoi(f.allinone); n > 1 {
		return "", fmt.Errorf("--tcpprober, --jsprober and --allinone exclude each other")
	}
	if f.cluster && !f.cri {
		return "", fmt.Errorf("--cluster runs on the CRI variant: add --cri")
	}
	if f.allinone && (f.cri || f.natsCluster) {
		return "", fmt.Errorf("--allinone runs its own embedded NATS and the process runtime; --cri and --nats-cluster apply to the five stages")
	}
	shadowFile, err := shadowOverlay(f.shadow, f.tcpprober || f.jsprober || f.allinone)
	if err != nil {
		return "", err
	}
	if f.allinone && f.tracing {
		return "", fmt.Errorf("--tracing applies to the five stages, not --allinone")
	}
	return shadowFile, nil
}

// composeFiles are the compose files of the flags, the base first; down
// takes the cluster network, tracing and NATS cluster overlays always, so that their
// services and volumes go whichever way the stack came up.
func (f *stackFlags) composeFiles(cmd, shadowFile string) []string {
	files := []string{filepath.Join(f.dir, "compose.yaml")}
	add := func(on bool, name string) {
		if on {
			files = append(files, filepath.Join(f.dir, name))
		}
	}
	add(f.tcpprober, "compose.tcpprober.yaml")
	add(f.jsprober, "compose.jsprober.yaml")
	add(f.allinone, "compose.allinone.yaml")
	add(f.cri, "compose.cri.yaml")
	add(f.cluster || cmd == "down", "compose.cluster.yaml")
	add(shadowFile != "", shadowFile)
	add(f.tracing || cmd == "down", "compose.tracing.yaml")
	add(f.natsCluster || cmd == "down", "compose.natscluster.yaml")
	return files
}

// prepareUp readies what up needs beyond the compose files: with --cri the
// images pods use, in the containerd podworkers will use; with --tracing
// the Jaeger image. A failure exits.
func (f *stackFlags) prepareUp(ctx context.Context) {
	if f.cri {
		cd, err := testenv.EnsureContainerd(ctx, testenv.ContainerdOptions{NoStart: true})
		if err != nil {
			fmt.Fprintf(os.Stderr, "stack up --cri: %v (start one, e.g. go run ./tools/criimages --serve --dir /tmp/splitlet-containerd, and export SPLITLET_CONTAINERD_ADDRESS=/tmp/splitlet-containerd/containerd.sock)\n", err)
			os.Exit(1)
		}
		fmt.Printf("stack: containerd at %s has the busybox and sandbox images\n", cd.Address)
		_ = os.Setenv(testenv.ContainerdAddressEnv, cd.Address)
	}
	if f.tracing {
		if err := ensureJaegerImage(ctx, f.dir); err != nil {
			fmt.Fprintf(os.Stderr, "stack up --tracing: %v\n", err)
			os.Exit(1)
		}
	}
}

// shadowOverlay is the compose file of --shadow=<stage>:<candidate>;
// empty without one. The live stage must be the stack's own prober.
func shadowOverlay(v string, swapped bool) (string, error) {
	if v == "" {
		return "", nil
	}
	stage, candidate, ok := strings.Cut(v, ":")
	if !ok || stage != "prober" || (candidate != "jsprober" && candidate != "tcpprober") {
		return "", fmt.Errorf("invalid value %q for --shadow: prober:jsprober or prober:tcpprober (the prober is the stage with shadow candidates in the stack)", v)
	}
	if swapped {
		return "", fmt.Errorf("--shadow shadows the stack's own prober; it excludes --tcpprober, --jsprober and --allinone")
	}
	return "compose.shadow-" + candidate + ".yaml", nil
}

func run(ctx context.Context, cmd, project string, files []string, podworkers int, timeout time.Duration, dir string) error {
	dc, err := tccompose.NewDockerComposeWith(tccompose.WithStackFiles(files...), tccompose.StackIdentifier(project))
	if err != nil {
		return err
	}
	defer dc.Close()
	if cmd == "down" {
		if err := dc.Down(ctx, tccompose.RemoveOrphans(true), tccompose.RemoveVolumes(true)); err != nil {
			return err
		}
		fmt.Printf("stack %s: down, volumes removed\n", project)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	env := map[string]string{"SPLITLET_PODWORKERS": strconv.Itoa(podworkers)}
	if a := os.Getenv(testenv.ContainerdAddressEnv); a != "" {
		env[testenv.ContainerdAddressEnv] = a
	}
	// The state directory is made here, as the user, 0700: the control
	// plane gives what it writes there (0600) the directory's owner.
	state := filepath.Join(dir, ".state")
	if v := os.Getenv("SPLITLET_STATE_DIR"); v != "" {
		state = v
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		return err
	}
	if err := dc.WithEnv(env).Up(ctx, tccompose.Wait(true), tccompose.RemoveOrphans(true)); err != nil {
		return err
	}
	kubeconfig := filepath.Join(state, "kubeconfig")
	fmt.Printf("stack %s: up and healthy in %v\n  kubectl --kubeconfig %s get nodes\n", project, time.Since(start).Round(time.Second), kubeconfig)
	if slices.Contains(files, filepath.Join(dir, "compose.tracing.yaml")) {
		fmt.Printf("  traces: the Jaeger UI at http://127.0.0.1:16686 (API: http://127.0.0.1:16686/api/traces?service=podconfig)\n")
	}
	return nil
}

// ensureJaegerImage builds splitlet/jaeger (make image-jaeger in the checkout
// dir belongs to) when the Docker engine does not have it: make images
// leaves it out.
func ensureJaegerImage(ctx context.Context, dir string) error {
	tag := os.Getenv("SPLITLET_TAG")
	if tag == "" {
		tag = "dev"
	}
	if exec.CommandContext(ctx, "docker", "image", "inspect", "splitlet/jaeger:"+tag).Run() == nil {
		return nil
	}
	fmt.Printf("stack: no splitlet/jaeger:%s image; make image-jaeger (building Jaeger takes a few minutes the first time)\n", tag)
	cmd := exec.CommandContext(ctx, "make", "-C", filepath.Join(dir, "..", ".."), "image-jaeger")
	cmd.Env = append(os.Environ(), "IMAGE_TAG="+tag)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// defaultDir is deploy/compose of the checkout this file is in, when it is
// there (go run), else of the working directory.
func defaultDir() string {
	if _, file, _, ok := runtime.Caller(0); ok {
		d := filepath.Join(filepath.Dir(file), "..", "..", "..", "deploy", "compose")
		if _, err := os.Stat(filepath.Join(d, "compose.yaml")); err == nil {
			return filepath.Clean(d)
		}
	}
	return filepath.Join("deploy", "compose")
}

// clusterNetLock is the host's cluster network lock (libs/testenv
// StartClusterNetwork), which compose.cluster.yaml's cluster-network
// mounts.
const clusterNetLock = "/tmp/splitlet-clusternet.lock"

// touch makes the file (0600) unless it exists.
func touch(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}
