package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	tccompose "github.com/testcontainers/testcontainers-go/modules/compose"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/splitlet/splitlet/libs/testenv"
)

// Fixed addresses of the stack (deploy/compose/compose.yaml).
const (
	nodeName   = "splitlet-node"
	natsURL    = "tls://127.0.0.1:14222"
	partitions = 16
)

// images the stacks run; `make images` builds them.
var images = []string{"controlplane", "nats", "nodehb", "podconfig", "podworkers", "prober", "statussync", "splitlet"}

func TestMain(m *testing.M) {
	if os.Getenv("SPLITLET_E2E") == "skip" {
		fmt.Println("e2e: skipped (SPLITLET_E2E=skip)")
		os.Exit(0)
	}
	// Every test here runs the compose stack on a Docker engine.
	if testenv.Short() {
		fmt.Println("e2e: skipped under -short (needs a Docker engine)")
		os.Exit(0)
	}
	// No reaper container: it would have to be pulled. Every test takes
	// its stack down itself.
	os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	os.Exit(m.Run())
}

var (
	preflightOnce sync.Once
	preflightErr  error
)

// preflight checks once that a Docker engine answers and the images are
// there (so that `go test -run '^$' -bench .` needs neither).
func preflight(t *testing.T) {
	t.Helper()
	preflightOnce.Do(func() {
		if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
			preflightErr = fmt.Errorf("no Docker engine answers (%v: %s); start dockerd, or set SPLITLET_E2E=skip", err, bytes.TrimSpace(out))
			return
		}
		for _, img := range images {
			if err := exec.Command("docker", "image", "inspect", image(img)).Run(); err != nil {
				preflightErr = fmt.Errorf("image %s missing; run `make images`", image(img))
				return
			}
		}
	})
	if preflightErr != nil {
		t.Fatalf("e2e: %v", preflightErr)
	}
	// The stack's fixed ports must be free (a stack left up, `make up`).
	for _, port := range stackPorts {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatalf("e2e: port %d of the stack is taken (a stack still up? make down): %v", port, err)
		}
		ln.Close()
	}
}

// imageTag is the tag of the images the stacks run: $SPLITLET_TAG, as in
// the compose files (`IMAGE_TAG=x make images` builds them), else dev.
func imageTag() string {
	if tag := os.Getenv("SPLITLET_TAG"); tag != "" {
		return tag
	}
	return "dev"
}

// image is the name of one of the stack's images, with imageTag.
func image(name string) string { return "splitlet/" + name + ":" + imageTag() }

// stackPorts are the fixed ports of deploy/compose/compose.yaml.
var stackPorts = []int{16443, 12379, 12380, 14222, 20250, 14443}

// composeDir is deploy/compose of this checkout.
func composeDir(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "deploy", "compose")
	if _, err := os.Stat(filepath.Join(dir, "compose.yaml")); err != nil {
		t.Fatalf("compose file: %v", err)
	}
	return dir
}

// stack is one running compose project.
type stack struct {
	project    string
	paths      []string
	env        map[string]string
	kubeconfig string
	cs         kubernetes.Interface
}

// upStack brings the stack of the given files (relative to deploy/compose)
// up and waits until every service is healthy; it takes it down, volumes
// and all, when the test ends (printing the containers' logs first when the
// test failed).
func upStack(t *testing.T, env map[string]string, files ...string) *stack {
	t.Helper()
	preflight(t)
	dir := composeDir(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	s := &stack{project: "splitlet-e2e-" + hex.EncodeToString(b), env: map[string]string{}}
	for _, f := range files {
		s.paths = append(s.paths, filepath.Join(dir, f))
	}
	state := t.TempDir()
	s.kubeconfig = filepath.Join(state, "kubeconfig")
	s.env["SPLITLET_STATE_DIR"] = state
	s.env["SPLITLET_TAG"] = imageTag()
	for k, v := range env {
		s.env[k] = v
	}
	t.Cleanup(func() {
		if t.Failed() {
			s.dumpLogs(t)
			s.dumpBus(t)
		}
		dc, err := tccompose.NewDockerComposeWith(tccompose.WithStackFiles(s.paths...), tccompose.StackIdentifier(s.project))
		if err != nil {
			t.Errorf("compose: %v", err)
			return
		}
		defer dc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := dc.Down(ctx, tccompose.RemoveOrphans(true), tccompose.RemoveVolumes(true)); err != nil {
			t.Errorf("compose down: %v", err)
		}
	})
	s.up(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	if err != nil {
		t.Fatalf("kubeconfig written by the stack: %v", err)
	}
	s.cs = kubernetes.NewForConfigOrDie(cfg)
	return s
}

// up runs compose up with the stack's environment and waits for health.
func (s *stack) up(t *testing.T) {
	t.Helper()
	dc, err := tccompose.NewDockerComposeWith(tccompose.WithStackFiles(s.paths...), tccompose.StackIdentifier(s.project))
	if err != nil {
		t.Fatalf("compose: %v", err)
	}
	defer dc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	if err := dc.WithEnv(s.env).Up(ctx, tccompose.Wait(true)); err != nil {
		t.Fatalf("compose up: %v", err)
	}
	t.Logf("stack %s up and healthy in %v (%v)", s.project, time.Since(start).Round(time.Second), s.env)
}

// natsConnect connects to the stack's NATS as the bus admin identity the
// control plane wrote (its nkey seed, and the CA of the servers' TLS).
func (s *stack) natsConnect(url string) (*nats.Conn, error) {
	admin := filepath.Join(s.env["SPLITLET_STATE_DIR"], "identities", "admin")
	nkey, err := nats.NkeyOptionFromSeed(filepath.Join(admin, "nats.nk"))
	if err != nil {
		return nil, err
	}
	return nats.Connect(url, nkey, nats.RootCAs(filepath.Join(admin, "ca.crt")), nats.Timeout(5*time.Second))
}

// scale is `docker compose up --scale podworkers=n` on the running stack.
func (s *stack) scale(t *testing.T, n int) {
	t.Helper()
	s.env["SPLITLET_PODWORKERS"] = fmt.Sprint(n)
	s.up(t)
}

// containers lists the IDs of a service's containers (running or not).
func (s *stack) containers(t *testing.T, service string) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-a", "-q", "--no-trunc",
		"--filter", "label=com.docker.compose.project="+s.project,
		"--filter", "label=com.docker.compose.service="+service).Output()
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	return strings.Fields(string(out))
}

// dumpLogs prints the end of every container's log and keeps the whole of
// each in <tmp>/<project>/ for a closer look.
func (s *stack) dumpLogs(t *testing.T) {
	out, err := exec.Command("docker", "ps", "-a", "--format", "{{.ID}} {{.Label \"com.docker.compose.service\"}} {{.Status}}",
		"--filter", "label=com.docker.compose.project="+s.project).Output()
	if err != nil {
		t.Logf("docker ps: %v", err)
		return
	}
	dir := filepath.Join(os.TempDir(), s.project)
	_ = os.MkdirAll(dir, 0o755)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		logs, _ := exec.Command("docker", "logs", f[0]).CombinedOutput()
		_ = os.WriteFile(filepath.Join(dir, f[1]+"-"+f[0]+".log"), logs, 0o644)
		if lines := bytes.Split(logs, []byte("\n")); len(lines) > 40 {
			logs = bytes.Join(lines[len(lines)-40:], []byte("\n"))
		}
		t.Logf("=== %s ===\n%s", line, logs)
	}
	t.Logf("whole container logs in %s", dir)
}

// dumpBus keeps, next to the logs, every stream's state and each of its
// consumers' position, leader and what it has pending: a consumer that
// stopped receiving shows there. A consumer whose server is gone makes its
// stream's listing wait, so each stream gets a deadline of its own.
func (s *stack) dumpBus(t *testing.T) {
	nc, err := s.natsConnect(natsURL)
	if err != nil {
		t.Logf("bus state: %v", err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Logf("bus state: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	var names []string
	lister := js.StreamNames(ctx)
	for n := range lister.Name() {
		names = append(names, n)
	}
	if err := lister.Err(); err != nil {
		fmt.Fprintf(&b, "streams: %v\n", err)
	}
	for _, name := range names {
		dumpStream(js, name, &b)
	}
	path := filepath.Join(os.TempDir(), s.project, "bus.txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Logf("bus state: %v", err)
		return
	}
	t.Logf("streams and consumers in %s", path)
}

// dumpStream writes one stream's state and its consumers' to b.
func dumpStream(js jetstream.JetStream, name string, b *strings.Builder) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, name)
	if err != nil {
		fmt.Fprintf(b, "stream %s: %v\n", name, err)
		return
	}
	si := st.CachedInfo()
	fmt.Fprintf(b, "stream %s: msgs %d last %d %s\n", name, si.State.Msgs, si.State.LastSeq, clusterOf(si.Cluster))
	consumers := st.ListConsumers(ctx)
	for ci := range consumers.Info() {
		fmt.Fprintf(b, "  consumer %s: delivered %d ack floor %d pending %d ack pending %d redelivered %d waiting %d %s\n",
			ci.Name, ci.Delivered.Stream, ci.AckFloor.Stream, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting, clusterOf(ci.Cluster))
	}
	if err := consumers.Err(); err != nil {
		fmt.Fprintf(b, "  consumers: %v\n", err)
	}
}

// clusterOf names a stream's or consumer's leader and its replicas.
func clusterOf(c *jetstream.ClusterInfo) string {
	if c == nil {
		return "(no cluster)"
	}
	out := "leader " + c.Leader
	for _, r := range c.Replicas {
		out += fmt.Sprintf(" replica %s(current=%t offline=%t)", r.Name, r.Current, r.Offline)
	}
	return out
}

// replicaID reads the replica id a podworkers container logged at start
// ("pod workers running", field replica).
func replicaID(container string) (string, error) {
	out, err := exec.Command("docker", "logs", container).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("docker logs %s: %v", container, err)
	}
	for _, line := range bytes.Split(out, []byte("\n")) {
		var entry struct {
			Msg     string `json:"msg"`
			Replica string `json:"replica"`
		}
		if json.Unmarshal(line, &entry) == nil && entry.Msg == "pod workers running" && entry.Replica != "" {
			return entry.Replica, nil
		}
	}
	return "", fmt.Errorf("container %s has not logged its replica id yet", container)
}
