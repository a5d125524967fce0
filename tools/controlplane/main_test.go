package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
)

// composeService is what the tests run of a service of the compose stack.
type composeService struct {
	Command     []string `json:"command"`
	Healthcheck struct {
		Test []string `json:"test"`
	} `json:"healthcheck"`
}

// composeServices reads the services of a file of deploy/compose.
func composeServices(t *testing.T, file string) map[string]composeService {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "compose", file))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Services map[string]composeService `json:"services"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return f.Services
}

// stackHost maps what the compose stack's commands name (mounts, fixed
// ports, ${VAR:-default}) to a test's directories, free ports and values.
type stackHost struct {
	paths map[string]string // mount point → directory
	ports map[string]string // fixed port → free port
	env   map[string]string // variable → value (else its default)
}

var composeVar = regexp.MustCompile(`\$\{(\w+):-([^}]*)\}`)

// args rewrites a command's arguments for the test.
func (h stackHost) args(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		a = composeVar.ReplaceAllStringFunc(a, func(m string) string {
			sub := composeVar.FindStringSubmatch(m)
			if v, ok := h.env[sub[1]]; ok {
				return v
			}
			return sub[2]
		})
		for fixed, free := range h.ports {
			a = strings.ReplaceAll(a, ":"+fixed, ":"+free)
			a = strings.ReplaceAll(a, "="+fixed, "="+free)
		}
		flag, value, isFlag := strings.Cut(a, "=")
		if !isFlag {
			flag, value = "", a
		}
		for mount, dir := range h.paths {
			if value == mount || strings.HasPrefix(value, mount+"/") {
				value = dir + strings.TrimPrefix(value, mount)
				break
			}
		}
		if isFlag {
			a = flag + "=" + value
		} else {
			a = value
		}
		out[i] = a
	}
	return out
}

// newStackHost gives the stack's mounts directories and its fixed ports free
// ports.
func newStackHost(t *testing.T) stackHost {
	t.Helper()
	h := stackHost{paths: map[string]string{"/rbac": filepath.Join("..", "..", "deploy", "rbac")}, ports: map[string]string{}, env: map[string]string{}}
	for _, m := range []string{"/etcd-pki", "/var/lib/etcd", "/state", "/out"} {
		h.paths[m] = t.TempDir()
	}
	for _, fixed := range []string{"12379", "12380", "16443"} {
		p, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		h.ports[fixed] = fmt.Sprint(p)
	}
	return h
}

// startEtcd runs bin/etcd as the compose stack does (etcd-certs, then
// etcd's command) and waits until the stack's health check of etcd passes;
// it returns etcd's client URL.
func startEtcd(t *testing.T, h stackHost) string {
	t.Helper()
	services := composeServices(t, "compose.yaml")
	certs := services["etcd-certs"].Command
	if len(certs) == 0 || certs[0] != "etcd-certs" {
		t.Fatalf("etcd-certs runs %q", certs)
	}
	if err := etcdCertsCmd(h.args(certs[1:]), io.Discard); err != nil {
		t.Fatal(err)
	}
	bin, err := testenv.Binary("etcd")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append(h.args(services["etcd"].Command), "--unsafe-no-fsync=true")...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var logs apptest.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	check := services["etcd"].Healthcheck.Test
	if len(check) < 3 || check[1] != "/controlplane" || check[2] != "check-url" {
		t.Fatalf("etcd's health check is %q", check)
	}
	var last error
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = checkURLCmd(ctx, h.args(check[3:]))
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("etcd not healthy within 30s: %v\n%s", last, logs.String())
	}
	return "https://127.0.0.1:" + h.ports["12379"]
}

// running is one `controlplane run` of a test.
type running struct {
	cancel context.CancelFunc
	done   chan error
	logs   *apptest.Buffer
}

// startRun starts run with args and waits until check passes on the state
// directory's kubeconfig.
func startRun(t *testing.T, kubeconfig string, args ...string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1), logs: &apptest.Buffer{}}
	t.Cleanup(cancel)
	go func() { r.done <- runCmd(ctx, args, r.logs) }()
	testenv.Eventually(t, 90*time.Second, "check passed", func() (bool, string) {
		err := checkCmd(t.Context(), []string{"--kubeconfig=" + kubeconfig})
		if err == nil {
			return true, ""
		}
		select {
		case err := <-r.done:
			t.Fatalf("run ended early: %v\n%s", err, r.logs.String())
		default:
		}
		return false, fmt.Sprintf("%v\n%s", err, r.logs.String())
	})
	return r
}

// stop ends the run and waits for it.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop")
	}
}

// whoAmI is the user the API server sees behind a kubeconfig's credentials.
func whoAmI(t *testing.T, kubeconfig string) (string, []string) {
	t.Helper()
	user, groups, err := testenv.WhoAmI(context.Background(), kubeconfig)
	if err != nil {
		t.Fatalf("%s: %v", kubeconfig, err)
	}
	return user, groups
}

// TestRunAgainstExternalEtcd: the compose stack's control plane, its
// services' commands read from deploy/compose/compose.yaml: etcd-certs,
// then etcd, which takes neither plain HTTP nor TLS without a certificate
// of its own CA, on its client and its peer URL, and passes the stack's
// health check; then run starts kube-apiserver against it, writes the
// kubeconfig (and its copy on the host), the CA, the stages' roles and one
// identity per stage (API user, bus seed, CA; nats-server's auth.conf and
// certificate), the credentials on the host 0600 in directories 0700 and
// owned by the host directory's owner; check passes while it runs and
// fails once it stopped. A second run on the same state keeps the CA and
// credentials: what the first wrote still works.
func TestRunAgainstExternalEtcd(t *testing.T) {
	testenv.SkipShort(t, "etcd and kube-apiserver")
	h := newStackHost(t)
	const node = "cp-node"
	h.env["SPLITLET_NODE_NAME"] = node
	state, out := h.paths["/state"], h.paths["/out"]
	owner := giveAway(t, out)
	etcdURL := startEtcd(t, h)
	peerURL := "https://127.0.0.1:" + h.ports["12380"]
	etcdCerts, err := testenv.LoadEtcdCerts(h.paths["/etcd-pki"])
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{etcdURL, peerURL} {
		etcdRefuses(t, u, etcdCerts, nil)
	}
	binDir, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(out, "kubeconfig")
	kubeconfig := filepath.Join(state, "kubeconfig")
	if err := checkCmd(t.Context(), []string{"--kubeconfig=" + kubeconfig}); err == nil {
		t.Fatal("check passed before run")
	}
	ids, natsDir := filepath.Join(out, "identities"), filepath.Join(out, "nats")
	args := append(apiserverArgs(t, h), "--bin-dir="+binDir)
	r := startRun(t, kubeconfig, args...)
	for _, p := range []string{kubeconfig, copyPath} {
		cfg, err := clientcmd.BuildConfigFromFlags("", p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if !strings.HasSuffix(cfg.Host, ":"+h.ports["16443"]) {
			t.Fatalf("%s: server %s, want port %s", p, cfg.Host, h.ports["16443"])
		}
		cs := kubernetes.NewForConfigOrDie(cfg)
		if _, err := cs.CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{}); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		wantMode(t, p, 0o600)
	}
	if data, err := os.ReadFile(filepath.Join(state, "ca.crt")); err != nil || !bytes.Contains(data, []byte("BEGIN CERTIFICATE")) {
		t.Fatalf("ca.crt: %v %q", err, data)
	}
	// the identities: the bootstrap token for nodehb and the all-in-one
	// (they join as the node and ask for its certificate), nothing for
	// podconfig, podworkers and statussync (they read the node's), the
	// role's for the prober.
	for _, id := range []string{"nodehb", "node"} {
		got, groups := whoAmI(t, filepath.Join(ids, id, "bootstrap-kubeconfig"))
		if !strings.HasPrefix(got, "system:bootstrap:") || !slices.Contains(groups, testenv.BootstrappersGroup) {
			t.Errorf("identity %s's bootstrap kubeconfig is %q in %v, want a bootstrap token", id, got, groups)
		}
		wantMode(t, filepath.Join(ids, id, "bootstrap-kubeconfig"), 0o600)
	}
	for _, id := range []string{"nodehb", "node", "podconfig", "podworkers", "statussync"} {
		if _, err := os.Stat(filepath.Join(ids, id, "kubeconfig")); err == nil {
			t.Errorf("identity %s has a kubeconfig of its own; it runs with the node's certificate", id)
		}
		wantMode(t, filepath.Join(ids, id), 0o700)
	}
	if got, _ := whoAmI(t, filepath.Join(ids, "prober", "kubeconfig")); got != "splitlet:prober" {
		t.Errorf("identity prober is %q, want splitlet:prober", got)
	}
	wantMode(t, filepath.Join(ids, "prober", "kubeconfig"), 0o600)
	wantMode(t, filepath.Join(out, "node"), 0o700)
	for _, d := range []string{out, ids, natsDir} {
		wantMode(t, d, 0o700)
	}
	wantMode(t, filepath.Join(natsDir, "server.key"), 0o600)
	wantOwner(t, out, owner)
	// A client certificate of the cluster's CA (a stage's identity) does
	// not open etcd either.
	nodeCfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(ids, "prober", "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{etcdURL, peerURL} {
		etcdRefuses(t, u, etcdCerts, nodeCfg)
	}
	conf, err := os.ReadFile(filepath.Join(natsDir, "auth.conf"))
	if err != nil {
		t.Fatal(err)
	}
	seeds := map[string][]byte{}
	for _, id := range bus.Identities() {
		seed := filepath.Join(ids, id, "nats.nk")
		fi, err := os.Stat(seed)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("seed of %s: %v %v", id, fi, err)
		}
		seeds[id], _ = os.ReadFile(seed)
		pub, err := bus.EnsureSeed(seed)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(conf, []byte(pub)) {
			t.Errorf("auth.conf lacks %s's key", id)
		}
	}
	for _, f := range []string{"server.crt", "server.key", "ca.crt"} {
		if _, err := os.Stat(filepath.Join(natsDir, f)); err != nil {
			t.Error(err)
		}
	}
	etcdCheck := []string{"--cacert=" + etcdCerts.CAFile, "--cert=" + etcdCerts.ClientCertFile, "--key=" + etcdCerts.ClientKeyFile}
	if err := checkURLCmd(t.Context(), append(etcdCheck, etcdURL+"/health")); err != nil {
		t.Fatal(err)
	}
	if err := checkURLCmd(t.Context(), append(etcdCheck, etcdURL+"/no-such-path")); err == nil {
		t.Fatal("check-url passed on a 404")
	}
	if err := checkURLCmd(t.Context(), []string{etcdURL + "/health"}); err == nil {
		t.Fatal("check-url without the client certificate passed on etcd")
	}
	oldAdmin, err := os.ReadFile(copyPath)
	if err != nil {
		t.Fatal(err)
	}
	oldProber := filepath.Join(out, "prober.kubeconfig")
	if data, err := os.ReadFile(filepath.Join(ids, "prober", "kubeconfig")); err != nil || os.WriteFile(oldProber, data, 0o600) != nil {
		t.Fatal(err)
	}
	r.stop(t)
	if err := checkCmd(t.Context(), []string{"--kubeconfig=" + kubeconfig}); err == nil {
		t.Fatal("check passed after stop")
	}

	// A restart keeps the CA and credentials: the first run's still work;
	// etcd-certs, run again, keeps etcd's.
	oldEtcdCA, err := os.ReadFile(etcdCerts.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := etcdCertsCmd(h.args(composeServices(t, "compose.yaml")["etcd-certs"].Command[1:]), io.Discard); err != nil {
		t.Fatal(err)
	}
	if now, err := os.ReadFile(etcdCerts.CAFile); err != nil || !bytes.Equal(now, oldEtcdCA) {
		t.Errorf("etcd's CA changed when etcd-certs ran again (%v)", err)
	}
	r = startRun(t, kubeconfig, args...)
	defer r.stop(t)
	if now, err := os.ReadFile(copyPath); err != nil || !bytes.Equal(now, oldAdmin) {
		t.Errorf("the admin kubeconfig changed across a restart (%v)", err)
	}
	if got, _ := whoAmI(t, oldProber); got != "splitlet:prober" {
		t.Errorf("the first run's prober identity is %q after a restart", got)
	}
	for id, seed := range seeds {
		if now, _ := os.ReadFile(filepath.Join(ids, id, "nats.nk")); !bytes.Equal(now, seed) {
			t.Errorf("the bus seed of %s changed across a restart", id)
		}
	}
}

// apiserverArgs are the arguments of run in the compose stack's apiserver
// service, for the test's host; compose.tracing.yaml's are the same and
// the tracing configuration.
func apiserverArgs(t *testing.T, h stackHost) []string {
	t.Helper()
	cmd := composeServices(t, "compose.yaml")["apiserver"].Command
	if len(cmd) == 0 || cmd[0] != "run" {
		t.Fatalf("the apiserver service runs %q", cmd)
	}
	traced := composeServices(t, "compose.tracing.yaml")["apiserver"].Command
	if !slices.Equal(traced[:min(len(cmd), len(traced))], cmd) || len(traced) != len(cmd)+1 ||
		!strings.HasPrefix(traced[len(cmd)], "--tracing-config-file=") {
		t.Errorf("compose.tracing.yaml's apiserver command is not compose.yaml's and the tracing file:\n%q\n%q", traced, cmd)
	}
	return h.args(cmd[1:])
}

// etcdRefuses checks that etcd at u (client or peer URL) answers neither
// plain HTTP nor TLS without a client certificate, or with the client
// certificate of other (when not nil: one of the cluster's CA).
func etcdRefuses(t *testing.T, u string, certs *testenv.EtcdCerts, other *rest.Config) {
	t.Helper()
	caPEM, err := os.ReadFile(certs.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	get := func(url string, c *tls.Config) error {
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: c}, Timeout: 5 * time.Second}
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if other != nil {
		cert, err := tls.X509KeyPair(other.CertData, other.KeyData)
		if err != nil {
			t.Fatal(err)
		}
		if get(u+"/health", &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}) == nil {
			t.Errorf("a client certificate of the cluster's CA reaches etcd at %s", u)
		}
		return
	}
	if plain := "http://" + strings.TrimPrefix(u, "https://") + "/health"; get(plain, nil) == nil {
		t.Errorf("plain HTTP reaches etcd at %s", plain)
	}
	if get(u+"/health", &tls.Config{RootCAs: pool}) == nil {
		t.Errorf("TLS without a client certificate reaches etcd at %s", u)
	}
}

// giveAway makes dir another user's (nobody's) when the test runs as root,
// as the host's state directory is its user's while the control plane runs
// as root in its container, and returns the uid expected on what run
// writes there.
func giveAway(t *testing.T, dir string) int {
	t.Helper()
	if os.Geteuid() != 0 {
		return os.Geteuid()
	}
	const nobody = 65534
	if err := os.Chown(dir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	return nobody
}

// wantOwner checks that everything under root belongs to uid.
func wantOwner(t *testing.T, root string, uid int) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != uid {
			t.Errorf("%s belongs to uid %d, want %d (the host directory's owner)", path, st.Uid, uid)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func wantMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s: mode %#o, want %#o", path, got, want)
	}
}
