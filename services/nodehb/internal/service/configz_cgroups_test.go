package service

import (
	"fmt"
	"testing"

	"github.com/spf13/pflag"

	"github.com/splitlet/splitlet/libs/config"
)

// /configz states the node's cgroup keys from the same definition the pod
// workers read (one flag set, two stages): cgroupsPerQOS as the runtime
// resolves it (off for the process runtime), the driver, the root, the
// pods' pids limit and what is held to allocatable.
func TestConfigzCgroups(t *testing.T) {
	cfg := &Config{}
	other := &config.Cgroups{} // the pod workers' copy
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	cfg.RegisterFlags(fs)
	other.RegisterFlags(fs)
	if err := fs.Parse([]string{"--cgroup-driver=systemd", "--cgroup-root=nodes.slice", "--pod-pids-limit=2048"}); err != nil {
		t.Fatal(err)
	}
	if other.Driver != "systemd" || other.Root != "nodes.slice" || other.PodPidsLimit != 2048 {
		t.Fatalf("the other stage's keys: %+v", other)
	}
	for runtime, perQOS := range map[string]bool{config.RuntimeCRI: true, config.RuntimeSim: true, config.RuntimeProcess: false} {
		kc, err := cfg.kubeletConfiguration(&config.Common{Runtime: runtime, NodeName: "n"}, "127.0.0.1", nil)
		if err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprint(*kc.CgroupsPerQOS, kc.CgroupDriver, kc.CgroupRoot, *kc.PodPidsLimit, kc.EnforceNodeAllocatable)
		enforce := []string{"pods"}
		if !perQOS {
			enforce = []string{"none"}
		}
		if want := fmt.Sprint(perQOS, "systemd", "nodes.slice", 2048, enforce); got != want {
			t.Errorf("runtime %s: %s, want %s", runtime, got, want)
		}
	}
}
