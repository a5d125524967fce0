package service

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/services/nodehb/internal/nodestatus"
)

// TestBadConfigNamesTheKey: invalid labels, taints and quantities fail at
// start with an error that names the key.
func TestBadConfigNamesTheKey(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--nodehb.labels=bad key=x"}, "nodehb.labels"},
		{[]string{"--nodehb.labels=ok=bad value!"}, "nodehb.labels"},
		{[]string{"--nodehb.taints=nocolon"}, "nodehb.taints"},
		{[]string{"--nodehb.taints=k=v:Sometimes"}, "nodehb.taints"},
		{[]string{"--nodehb.taints=k=v:NoSchedule,k=w:NoSchedule"}, "nodehb.taints"},
		{[]string{"--nodehb.cpu=lots"}, "nodehb.cpu"},
		{[]string{"--nodehb.memory=-1Gi"}, "nodehb.memory"},
		{[]string{"--nodehb.ephemeral-storage=1X"}, "nodehb.ephemeral-storage"},
		{[]string{"--nodehb.pods=1.5"}, "nodehb.pods"},
		{[]string{"--nodehb.address=localhost"}, "nodehb.address"},
		{[]string{"--nodehb.port=70000"}, "nodehb.port"},
		{[]string{"--nodehb.lease-duration=0s"}, "nodehb.lease-duration"},
		{[]string{"--nodehb.tls-cert-file=/x"}, "nodehb.tls-private-key-file"},
		{[]string{"--nodehb.client-ca-file=/does/not/exist"}, "nodehb.client-ca-file"},
		{[]string{"--nodehb.authentication-failure-qps=-1"}, "nodehb.authentication-failure-qps"},
		{[]string{"--nodehb.authentication-failure-qps=NaN"}, "nodehb.authentication-failure-qps"},
		{[]string{"--nodehb.authentication-failure-burst=0"}, "nodehb.authentication-failure-burst"},
	}
	common := &config.Common{NodeName: "n1", Runtime: config.RuntimeSim, Partitions: 4}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			cfg := defaults(t, c.args...)
			err := cfg.parse()
			if err == nil {
				_, err = cfg.desired(common, nodestatus.SystemInfo("v", "sim", "v"))
			}
			if err == nil {
				_, err = cfg.clientCAs()
			}
			if err == nil {
				t.Fatalf("accepted")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not name %s", err, c.want)
			}
		})
	}
}

// TestRuntimeDefaults: sim gets a large node, process the host's figures
// with 110 pods.
func TestRuntimeDefaults(t *testing.T) {
	cfg := defaults(t)
	sim, err := cfg.desired(&config.Common{NodeName: "n1", Runtime: config.RuntimeSim}, nodestatus.SystemInfo("v", "sim", "v"))
	if err != nil {
		t.Fatal(err)
	}
	if p := sim.Capacity["pods"]; p.Value() != 20000 {
		t.Errorf("sim pods = %s", p.String())
	}
	proc, err := cfg.desired(&config.Common{NodeName: "n1", Runtime: config.RuntimeProcess, DataDir: t.TempDir()}, nodestatus.SystemInfo("v", "process", "v"))
	if err != nil {
		t.Fatal(err)
	}
	if p := proc.Capacity["pods"]; p.Value() != 110 {
		t.Errorf("process pods = %s", p.String())
	}
	sized, err := cfg.desired(&config.Common{NodeName: "n1", Runtime: config.RuntimeSim, MaxPods: 300}, nodestatus.SystemInfo("v", "sim", "v"))
	if err != nil {
		t.Fatal(err)
	}
	if p := sized.Capacity["pods"]; p.Value() != 300 {
		t.Errorf("sim pods with max-pods 300 = %s", p.String())
	}
	if c := proc.Capacity["cpu"]; c.Value() < 1 {
		t.Errorf("process cpu = %s", c.String())
	}
	if m := proc.Capacity["memory"]; m.Value() < 1<<20 {
		t.Errorf("process memory = %s", m.String())
	}
}

// TestFailureLimitKeys: the limit's keys come from the environment and the
// YAML file like every key; qps 0 with burst 0 (no limit) is accepted.
func TestFailureLimitKeys(t *testing.T) {
	file := filepath.Join(t.TempDir(), "splitlet.yaml")
	if err := os.WriteFile(file, []byte("nodehb:\n  authentication-failure-burst: 7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := &Config{}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.String(config.FileKey, "", "")
	cfg.RegisterFlags(fs)
	env := map[string]string{config.EnvName("nodehb.authentication-failure-qps"): "0.5"}
	if err := config.Load(fs, []string{"--config=" + file}, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if cfg.AuthFailureQPS != 0.5 || cfg.AuthFailureBurst != 7 {
		t.Errorf("qps %v burst %d, want 0.5 from the environment and 7 from the file", cfg.AuthFailureQPS, cfg.AuthFailureBurst)
	}
	if err := defaults(t, "--nodehb.authentication-failure-qps=0", "--nodehb.authentication-failure-burst=0").Validate(); err != nil {
		t.Errorf("no limit refused: %v", err)
	}
	if d := defaults(t); d.AuthFailureQPS != 1 || d.AuthFailureBurst != 10 {
		t.Errorf("defaults %v/%d, want 1/10 (README)", d.AuthFailureQPS, d.AuthFailureBurst)
	}
}
