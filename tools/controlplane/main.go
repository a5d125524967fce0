// Command controlplane is the control plane of the compose stack
// (deploy/compose). `controlplane etcd-certs` makes etcd's CA and
// certificates (kept when there) before etcd starts: etcd takes only
// clients with a certificate of its own CA. `controlplane run` runs
// kube-apiserver (from the image, next to this binary) on a fixed port
// against that etcd, with the client certificate, and with a CA and
// credentials it keeps in the state directory across restarts (a restarted
// API server locks no stage out). It writes an admin kubeconfig and the CA
// file, applies manifests (--apply: the stages' roles), writes one identity
// per stage (--identities-dir: kubeconfig, NATS nkey seed, CA; --nats-dir:
// nats-server's auth.conf and TLS certificate, and with --nats-routes the
// cluster's route credentials), credentials 0600 in
// directories 0700 owned by the owner of --host-dir, and follows
// kube-apiserver's log on its own output until a signal or kube-apiserver's
// exit.
//
// The images have no shell and no curl, so the same binary is the health
// check of the control plane, of etcd and of nats-server:
//
//	controlplane check --kubeconfig=/state/kubeconfig   # kube-apiserver /readyz
//	controlplane check-url http://127.0.0.1:16443/livez # any URL answering 200
//	controlplane check-url --cacert=/etcd-pki/ca.crt --cert=/etcd-pki/client.crt \
//	    --key=/etcd-pki/client.key https://127.0.0.1:12379/health   # with a client certificate
//	controlplane check-nats --ca=ca.crt 127.0.0.1:14222 # nats-server's client port: INFO with JetStream, TLS
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/splitlet/splitlet/libs/testenv"
)

const usage = `usage:
  controlplane etcd-certs --dir=DIR  make etcd's CA and certificates in DIR, unless there
  controlplane run [flags]           run kube-apiserver against an external etcd
  controlplane check [flags]         exit 0 when kube-apiserver's /readyz answers ok
  controlplane check-url [--cacert=FILE --cert=FILE --key=FILE] URL
                                     exit 0 when GET URL answers 200
  controlplane check-nats [--ca F] HOST:PORT
                                     exit 0 when nats-server answers there with JetStream on (and TLS verified by F)
  controlplane cluster-network [flags]
                                     run CoreDNS and kube-proxy for the node's pods (root, the host's network)
  controlplane check-file FILE       exit 0 when FILE exists
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "run":
		err = runCmd(ctx, os.Args[2:], os.Stdout)
	case "check":
		err = checkCmd(ctx, os.Args[2:])
	case "check-url":
		err = checkURLCmd(ctx, os.Args[2:])
	case "etcd-certs":
		err = etcdCertsCmd(os.Args[2:], os.Stdout)
	case "check-nats":
		err = checkNATS(ctx, os.Args[2:])
	case "cluster-network":
		err = clusterNetCmd(ctx, os.Args[2:], os.Stdout)
	case "check-file":
		err = checkFileCmd(os.Args[2:])
	default:
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "controlplane %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

type runOptions struct {
	stateDir    string
	port        int
	etcdURL     string
	etcdCerts   string
	hostDir     string
	kubeconfigs []string
	binDir      string
	apply       []string
	identities  string
	natsDir     string
	node        string
	natsRoutes  []string
	tracing     string
	metricsPort int
	services    bool
	nodeDir     string
}

func parseRun(args []string) (runOptions, error) {
	var o runOptions
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.StringVar(&o.stateDir, "state-dir", "/state", "credentials, kubeconfig and ca.crt go here (a volume the services mount)")
	fs.IntVar(&o.port, "port", 16443, "kube-apiserver's secure port on 127.0.0.1")
	fs.StringVar(&o.etcdURL, "etcd-url", "https://127.0.0.1:12379", "the etcd to use (https)")
	fs.StringVar(&o.etcdCerts, "etcd-certs", "/etcd-pki", "etcd's CA and the client certificate to reach it (made by etcd-certs)")
	fs.StringVar(&o.hostDir, "host-dir", "", "the host's directory the copies, identities and nats files go under: made 0700, and what run writes there takes its owner (the host's user reads the 0600 files)")
	extra := fs.String("kubeconfig-copy", "", "comma-separated extra paths of the admin kubeconfig (e.g. a host bind mount)")
	fs.StringVar(&o.binDir, "bin-dir", "", "where kube-apiserver is; empty: this binary's directory")
	apply := fs.String("apply", "", "comma-separated manifests (files or directories) to apply once ready (deploy/rbac)")
	fs.StringVar(&o.identities, "identities-dir", "", "write one identity directory per stage here (kubeconfig, nats.nk, ca.crt); empty: none")
	fs.StringVar(&o.natsDir, "nats-dir", "", "with --identities-dir: nats-server's auth.conf, server.crt and server.key go here")
	fs.StringVar(&o.node, "node-name", "", "with --identities-dir: the node the identities are for")
	routes := fs.String("nats-routes", os.Getenv("SPLITLET_NATS_ROUTES"), "with --nats-dir: the route ports (host:port, comma-separated) of a NATS cluster: its route credentials (route CA, certificate and key, password) and cluster.conf (the route authorization and the routes) go to --nats-dir; also SPLITLET_NATS_ROUTES")
	fs.StringVar(&o.tracing, "tracing-config-file", "", "kube-apiserver's --tracing-config-file (a TracingConfiguration: its spans go to that OTLP gRPC endpoint); statussync's identity joins system:monitoring, whose trace context kube-apiserver continues")
	fs.IntVar(&o.metricsPort, "metrics-server-port", 0, "with --identities-dir: turn the aggregation layer on and register metrics-server (metrics.k8s.io/v1beta1, what kubectl top reads) at 127.0.0.1:PORT, its credentials in <identities-dir>/metrics-server; 0: none")
	fs.StringVar(&o.nodeDir, "node-dir", "", "with --identities-dir: the node's credential directory (0700), where the stage that joins keeps the client certificate it gets with the bootstrap token and the others read it; a certificate there of another CA is removed")
	fs.BoolVar(&o.services, "service-controllers", false, "run kube-controller-manager's endpointslice controllers (a Service's endpoints from its pods)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.metricsPort != 0 && (o.identities == "" || o.metricsPort < 0 || o.metricsPort > 65535) {
		return o, fmt.Errorf("invalid value %d for --metrics-server-port: a port, with --identities-dir", o.metricsPort)
	}
	for _, p := range strings.Split(*apply, ",") {
		if p = strings.TrimSpace(p); p != "" {
			o.apply = append(o.apply, p)
		}
	}
	for _, r := range strings.Split(*routes, ",") {
		if r = strings.TrimSpace(r); r != "" {
			if _, _, err := net.SplitHostPort(r); err != nil {
				return o, fmt.Errorf("invalid value %q for --nats-routes: %w", r, err)
			}
			o.natsRoutes = append(o.natsRoutes, r)
		}
	}
	if len(o.natsRoutes) > 0 && o.identities == "" {
		return o, errors.New("--nats-routes needs --identities-dir and --nats-dir")
	}
	if o.identities != "" && (o.natsDir == "" || o.node == "" || o.nodeDir == "") {
		return o, errors.New("--identities-dir needs --nats-dir, --node-name and --node-dir")
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if !strings.HasPrefix(o.etcdURL, "https://") {
		return o, errors.New("etcd-url must be https:// (etcd takes only clients with a certificate)")
	}
	o.kubeconfigs = []string{filepath.Join(o.stateDir, "kubeconfig")}
	for _, p := range strings.Split(*extra, ",") {
		if p = strings.TrimSpace(p); p != "" {
			o.kubeconfigs = append(o.kubeconfigs, p)
		}
	}
	if o.binDir == "" {
		self, err := os.Executable()
		if err != nil {
			return o, err
		}
		o.binDir = filepath.Dir(self)
	}
	return o, nil
}

func runCmd(ctx context.Context, args []string, out io.Writer) error {
	o, err := parseRun(args)
	if err != nil {
		return err
	}
	// The CA, certificates and tokens of an earlier start are kept (the
	// stages' identities stay valid). The state directory's kubeconfig,
	// which the health check reads, is written again last: the check
	// passes only once this start has applied and written everything.
	if err := os.Remove(o.kubeconfigs[0]); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	dir := filepath.Join(o.stateDir, "controlplane")
	if err := os.Setenv(testenv.BinDirEnv, o.binDir); err != nil {
		return err
	}
	etcdCerts, err := testenv.LoadEtcdCerts(o.etcdCerts)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "controlplane: starting kube-apiserver on 127.0.0.1:%d against etcd %s\n", o.port, o.etcdURL)
	cpOpts := testenv.ControlPlaneOptions{Dir: dir, Port: o.port, EtcdURL: o.etcdURL, EtcdCerts: etcdCerts, KeepCredentials: true,
		AggregationLayer: o.metricsPort != 0, ServiceControllers: o.services,
		// the node joins with a bootstrap token: kube-controller-manager
		// approves and signs its client certificate's CSR.
		BootstrapTokens: o.identities != "", CSRControllers: o.identities != ""}
	if o.tracing != "" {
		cpOpts.APIServerArgs = []string{"--tracing-config-file=" + o.tracing}
	}
	cp, err := testenv.StartControlPlane(ctx, cpOpts)
	if err != nil {
		return err
	}
	defer cp.Stop()
	if len(o.apply) > 0 {
		if err := testenv.Apply(ctx, cp.Config, o.apply...); err != nil {
			return err
		}
	}
	if err := writeOutputs(ctx, cp, o); err != nil {
		return err
	}
	fmt.Fprintf(out, "controlplane: kube-apiserver ready at %s; admin kubeconfig: %s\n", cp.URL, strings.Join(o.kubeconfigs, ", "))

	followCtx, stopFollow := context.WithCancel(ctx)
	defer stopFollow()
	go follow(followCtx, filepath.Join(dir, "kube-apiserver.log"), out)
	return watchRunning(ctx, out, cp.Running, "controlplane: stopping", errors.New("kube-apiserver exited"))
}

// watchRunning checks every second that running still holds: it returns
// exited once it does not, and nil (after printing stopping) once ctx ends.
func watchRunning(ctx context.Context, out io.Writer, running func() bool, stopping string, exited error) error {
	err := wait.PollUntilContextCancel(ctx, time.Second, false, func(context.Context) (bool, error) { return !running(), nil })
	if err != nil {
		fmt.Fprintln(out, stopping)
		return nil
	}
	return exited
}

// writeOutputs writes the identities, the CA file and the admin
// kubeconfigs (0600): the copies first, the health check's own last, after
// the host's files took their owner.
func writeOutputs(ctx context.Context, cp *testenv.ControlPlane, o runOptions) error {
	if o.hostDir != "" {
		if err := testenv.PrivateDir(o.hostDir); err != nil {
			return err
		}
	}
	if o.identities != "" {
		if err := prepareNodeDir(cp, o.nodeDir); err != nil {
			return fmt.Errorf("node directory: %w", err)
		}
		if err := writeIdentities(ctx, cp, o.identities, o.natsDir, o.node, o.natsRoutes, o.tracing != ""); err != nil {
			return fmt.Errorf("identities: %w", err)
		}
	}
	if o.metricsPort != 0 {
		if err := writeMetricsServer(ctx, cp, filepath.Join(o.identities, metricsServerIdentity), o.metricsPort); err != nil {
			return fmt.Errorf("metrics-server: %w", err)
		}
	}
	if err := writeFile(filepath.Join(o.stateDir, "ca.crt"), cp.CAData, 0o644); err != nil {
		return err
	}
	for i := len(o.kubeconfigs) - 1; i >= 1; i-- {
		if err := cp.WriteKubeconfig(o.kubeconfigs[i], testenv.AdminUser); err != nil {
			return err
		}
	}
	if o.hostDir != "" {
		if err := chownLikeRoot(o.hostDir); err != nil {
			return fmt.Errorf("owner of %s: %w", o.hostDir, err)
		}
	}
	return cp.WriteKubeconfig(o.kubeconfigs[0], testenv.AdminUser)
}

// chownLikeRoot gives everything under root root's owner, when this process
// may (it runs as root in its container, and the host's user owns the
// directory): the files are 0600, so the host's user could not read them
// as root's.
func chownLikeRoot(root string) error {
	fi, err := os.Stat(root)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || os.Geteuid() != 0 {
		return nil
	}
	uid, gid := int(st.Uid), int(st.Gid)
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}

// etcdCertsCmd makes etcd's CA and certificates in --dir, or keeps those
// there: the compose stack's one-shot step before etcd starts.
func etcdCertsCmd(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("etcd-certs", flag.ContinueOnError)
	dir := fs.String("dir", "/etcd-pki", "where etcd's CA, its certificate and the client certificate go (mode 0700)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	c, err := testenv.EnsureEtcdCerts(*dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "controlplane: etcd's certificates in %s\n", c.Dir)
	return nil
}

// follow copies what is appended to the file to w until ctx ends.
func follow(ctx context.Context, path string, w io.Writer) {
	var f *os.File
	for f == nil {
		var err error
		if f, err = os.Open(path); err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	defer f.Close()
	buf := make([]byte, 32*1024)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			_, _ = w.Write(buf[:n])
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func checkCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "/state/kubeconfig", "admin kubeconfig written by run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	cfg.Timeout = 5 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return cs.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
}

// checkURLCmd is check-url: with --cacert, --cert and --key, over TLS with
// that CA and client certificate (etcd's health).
func checkURLCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("check-url", flag.ContinueOnError)
	caFile := fs.String("cacert", "", "CA file that verifies the server (https)")
	certFile := fs.String("cert", "", "client certificate file (with --key)")
	keyFile := fs.String("key", "", "client key file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("want one URL")
	}
	tlsConfig, err := clientTLS(*caFile, *certFile, *keyFile)
	if err != nil {
		return err
	}
	return checkURL(ctx, fs.Arg(0), tlsConfig)
}

// clientTLS is the TLS configuration of the files; nil when none is given.
func clientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" && certFile == "" && keyFile == "" {
		return nil, nil
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("--cert and --key go together")
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		caPEM, err := os.ReadFile(caFile)
		if err != nil {
			return nil, err
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("%s: no certificate", caFile)
		}
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

func checkURL(ctx context.Context, url string, tlsConfig *tls.Config) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("%s: %s %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
