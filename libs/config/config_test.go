package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/splitlet/splitlet/libs/config"
)

type keys struct {
	common config.Common
	period time.Duration
	labels []string
}

func newFlags() (*pflag.FlagSet, *keys) {
	k := &keys{}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	k.common.RegisterFlags(fs)
	fs.DurationVar(&k.period, "podconfig.snapshot-period", 30*time.Second, "")
	fs.StringSliceVar(&k.labels, "nodehb.labels", nil, "")
	return fs, k
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "splitlet.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPrecedenceFlagEnvFileDefault(t *testing.T) {
	file := writeFile(t, `
node-name: from-file
nats-url: nats://file:4222
partitions: 8
podconfig:
  snapshot-period: 5s
nodehb.labels: [a=1, b=2]
`)
	fs, k := newFlags()
	err := config.Load(fs, []string{"--config", file, "--node-name", "from-flag"},
		env(map[string]string{"SPLITLET_NODE_NAME": "from-env", "SPLITLET_NATS_URL": "nats://env:4222"}))
	if err != nil {
		t.Fatal(err)
	}
	if k.common.NodeName != "from-flag" {
		t.Errorf("node-name %q: the flag must win", k.common.NodeName)
	}
	if k.common.NATSURL != "nats://env:4222" {
		t.Errorf("nats-url %q: the environment must win over the file", k.common.NATSURL)
	}
	if k.common.Partitions != 8 || k.period != 5*time.Second {
		t.Errorf("partitions %d, period %v: the file must win over defaults (nested keys too)", k.common.Partitions, k.period)
	}
	if strings.Join(k.labels, ",") != "a=1,b=2" {
		t.Errorf("labels %v from a YAML list", k.labels)
	}
	if k.common.KubeAPIQPS != 0 || k.common.KubeAPIBurst != 0 || k.common.Runtime != "sim" {
		t.Errorf("defaults lost: %+v", k.common)
	}
}

// TestAPILimitsByRuntime: kube-api-qps/burst left at 0 take the kubelet's
// limits where pods are real and the scale-test limits on sim; a value set
// is kept whatever the runtime.
func TestAPILimitsByRuntime(t *testing.T) {
	for _, c := range []struct {
		runtime   string
		qps       float32
		burst     int
		wantQPS   float32
		wantBurst int
	}{
		{config.RuntimeSim, 0, 0, 1000, 2000},
		{config.RuntimeProcess, 0, 0, 50, 100},
		{config.RuntimeCRI, 0, 0, 50, 100},
		{config.RuntimeSim, 20, 0, 20, 2000},
		{config.RuntimeCRI, 0, 7, 50, 7},
	} {
		common := config.Common{NodeName: "n", Partitions: 16, NATSReplicas: 1, ShutdownTimeout: time.Second,
			Runtime: c.runtime, CRIEndpoint: config.DefaultCRIEndpoint, KubeAPIQPS: c.qps, KubeAPIBurst: c.burst, Tracing: config.TracingKeys{SampleRate: 1}}
		if err := common.Complete(); err != nil {
			t.Fatal(err)
		}
		if common.KubeAPIQPS != c.wantQPS || common.KubeAPIBurst != c.wantBurst {
			t.Errorf("%s with %v/%d: %v/%d, want %v/%d", c.runtime, c.qps, c.burst, common.KubeAPIQPS, common.KubeAPIBurst, c.wantQPS, c.wantBurst)
		}
	}
}

func TestConfigFileFromEnvironment(t *testing.T) {
	file := writeFile(t, "runtime: process\n")
	fs, k := newFlags()
	if err := config.Load(fs, nil, env(map[string]string{"SPLITLET_CONFIG": file})); err != nil {
		t.Fatal(err)
	}
	if k.common.Runtime != "process" {
		t.Fatalf("runtime %q", k.common.Runtime)
	}
}

func TestErrorsNameTheKey(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		file string
		want []string
	}{
		{"bad flag", []string{"--runtime=docker"}, nil, "", []string{"--runtime", "docker"}},
		{"bad env", nil, map[string]string{"SPLITLET_PARTITIONS": "many"}, "", []string{"partitions", "SPLITLET_PARTITIONS"}},
		{"bad file value", nil, nil, "kube-api-qps: fast\n", []string{"kube-api-qps", "config file"}},
		{"unknown file key", nil, nil, "nodename: x\n", []string{"unknown key", "nodename"}},
		{"bad yaml", nil, nil, "a: [\n", []string{"config file"}},
		{"stray argument", []string{"extra"}, nil, "", []string{"unexpected arguments"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs, _ := newFlags()
			fs.SetOutput(new(strings.Builder))
			args := c.args
			if c.file != "" {
				args = append(args, "--config", writeFile(t, c.file))
			}
			err := config.Load(fs, args, env(c.env))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestComplete(t *testing.T) {
	fs, k := newFlags()
	if err := config.Load(fs, []string{"--node-name=Bad_Name"}, env(nil)); err != nil {
		t.Fatal(err)
	}
	if err := k.common.Complete(); err == nil || !strings.Contains(err.Error(), "node-name") {
		t.Fatalf("want a node-name error, got %v", err)
	}
	fs, k = newFlags()
	if err := config.Load(fs, []string{"--node-name=n1"}, env(nil)); err != nil {
		t.Fatal(err)
	}
	if err := k.common.Complete(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(k.common.DataDir, "n1") {
		t.Fatalf("default data dir %q does not name the node", k.common.DataDir)
	}
	if config.EnvName("podconfig.snapshot-period") != "SPLITLET_PODCONFIG_SNAPSHOT_PERIOD" {
		t.Fatal(config.EnvName("podconfig.snapshot-period"))
	}
}
