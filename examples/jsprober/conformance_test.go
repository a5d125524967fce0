package jsprober_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/bus/bustest"
	"github.com/splitlet/splitlet/libs/conformance"
	"github.com/splitlet/splitlet/libs/discovery"
	"github.com/splitlet/splitlet/libs/testenv"
)

// TestConformance: jsprober (Node.js), run as a child process against an
// embedded NATS as the prober's bus identity, answers as splitlet-prober on
// the service API and passes every case of the prober conformance kit
// without a permission violation (its inboxes, pull deliveries included,
// are the prober's).
func TestConformance(t *testing.T) {
	const node = "jsprober-node"
	n := bustest.Start(t, node)
	startJSProber(t, "--nats-url="+n.URL, "--nats-nkey="+n.Seed(bus.StageProber), "--node-name="+node, "--partitions=4")
	nc := n.Connect(t, bus.AdminIdentity)
	st := waitReady(t, nc, node)
	t.Run("discovery", func(t *testing.T) { checkDiscovery(t, nc, node, st) })
	conformance.Prober(t, conformance.Target{NATSURL: n.URL, NATSOptions: n.Options(t, bus.AdminIdentity), Node: node, Partitions: 4, JSONOnly: true})
	if v := n.Violations.All(); len(v) > 0 {
		t.Errorf("permission violations:\n%s", strings.Join(v, "\n"))
	}
}

// jsProc is a running jsprober.
type jsProc struct {
	cmd    *exec.Cmd
	exited chan error
	killed bool
}

// kill9 ends the process with SIGKILL (no drain, no goodbye) and waits
// for it.
func (p *jsProc) kill9(t *testing.T) {
	t.Helper()
	p.killed = true
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
}

// startJSProber runs `node prober.js args...` until the test ends; then it
// sends SIGTERM and expects a clean exit, with every log line JSON (unless
// the test killed it with kill9).
func startJSProber(t *testing.T, args ...string) *jsProc {
	t.Helper()
	testenv.SkipShort(t, "Node.js and examples/jsprober's node_modules")
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Dir(file)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node (Node.js 20 or later) is not on PATH: jsprober is a Node.js program (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "nats", "package.json")); err != nil {
		t.Fatalf("examples/jsprober/node_modules is missing: run `npm ci --prefix examples/jsprober` (or `make jsprober-deps`) first (%v)", err)
	}
	cmd := exec.Command(node, append([]string{filepath.Join(dir, "prober.js"), "--data-dir=" + t.TempDir()}, args...)...)
	logs := &apptest.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	p := &jsProc{cmd: cmd, exited: exited}
	t.Cleanup(func() {
		if p.killed {
			return
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("jsprober did not exit cleanly on SIGTERM: %v", err)
			}
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("jsprober still running 15 s after SIGTERM; killed")
		}
		for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var entry struct {
				Level, Msg string
			}
			if err := json.Unmarshal([]byte(line), &entry); err != nil || entry.Level == "" || entry.Msg == "" {
				t.Errorf("log line is not a JSON object with level and msg: %q", line)
			}
		}
		if t.Failed() {
			t.Logf("jsprober's log:\n%s", logs.String())
		}
	})
	return p
}

// waitReady asks the status endpoint until jsprober says it is ready.
func waitReady(t *testing.T, nc *nats.Conn, node string) discovery.StageStatus {
	t.Helper()
	return waitReadyAs(t, nc, node, "prober")
}

// waitReadyAs asks the status endpoint of stage (prober, or shadow-prober)
// until jsprober says it is ready.
func waitReadyAs(t *testing.T, nc *nats.Conn, node, stage string) discovery.StageStatus {
	t.Helper()
	var st discovery.StageStatus
	testenv.Eventually(t, 30*time.Second, "jsprober ready on "+bus.For(node).Status(stage), func() (bool, string) {
		m, err := nc.Request(bus.For(node).Status(stage), nil, time.Second)
		if err != nil {
			return false, err.Error() // polling a process that is starting
		}
		if err := json.Unmarshal(m.Data, &st); err != nil {
			t.Fatalf("status answer is not a StageStatus: %v: %s", err, m.Data)
		}
		return st.Ready, string(m.Data)
	})
	return st
}

// checkDiscovery: the StageStatus and $SRV.INFO are those of a prober
// replacement (docs/bus.md, Discovery).
func checkDiscovery(t *testing.T, nc *nats.Conn, node string, st discovery.StageStatus) {
	if st.Node != node || st.Stage != "prober" || st.Implementation != "jsprober" || st.Partitions != nil {
		t.Errorf("StageStatus %+v: want node %s, stage prober, implementation jsprober, partitions null", st, node)
	}
	durables := map[string]bool{}
	for _, c := range st.Consumers {
		durables[c.Durable] = true
	}
	if !durables["prober"] || !durables["prober-status"] {
		t.Errorf("StageStatus consumers %+v: want the durables prober and prober-status", st.Consumers)
	}
	m, err := nc.Request(micro.APIPrefix+".INFO."+discovery.ServiceName("prober"), nil, 2*time.Second)
	if err != nil {
		t.Fatalf("$SRV.INFO splitlet-prober: %v", err)
	}
	var info micro.Info
	if err := json.Unmarshal(m.Data, &info); err != nil {
		t.Fatal(err)
	}
	if info.Metadata["node"] != node || info.Metadata["stage"] != "prober" || info.Metadata["implementation"] != "jsprober" {
		t.Errorf("$SRV.INFO metadata %v: want node, stage prober, implementation jsprober", info.Metadata)
	}
	if len(info.Endpoints) != 1 || info.Endpoints[0].Subject != bus.For(node).Status("prober") {
		t.Errorf("$SRV.INFO endpoints %+v: want the one status endpoint", info.Endpoints)
	}
	// splitlet status reads the StageStatus from $SRV.STATS endpoint data.
	m, err = nc.Request(micro.APIPrefix+".STATS."+discovery.ServiceName("prober"), nil, 2*time.Second)
	if err != nil {
		t.Fatalf("$SRV.STATS splitlet-prober: %v", err)
	}
	var stats micro.Stats
	if err := json.Unmarshal(m.Data, &stats); err != nil {
		t.Fatal(err)
	}
	var data discovery.StageStatus
	if len(stats.Endpoints) != 1 || json.Unmarshal(stats.Endpoints[0].Data, &data) != nil || data.Implementation != "jsprober" || !data.Ready {
		t.Errorf("$SRV.STATS: want one endpoint whose data is jsprober's ready StageStatus, got %s", m.Data)
	}
}
