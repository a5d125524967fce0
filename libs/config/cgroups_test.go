package config_test

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/splitlet/splitlet/libs/config"
)

func cgroupFlags(stages int) (*pflag.FlagSet, []*config.Cgroups) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	fs.String(config.FileKey, "", "")
	var out []*config.Cgroups
	for range stages {
		c := &config.Cgroups{}
		c.RegisterFlags(fs)
		out = append(out, c)
	}
	return fs, out
}

// The cgroup keys have the kubelet's defaults (cgroups-per-qos on but for
// the process runtime), come from a flag, the environment or the file,
// reach every stage of a process, and refuse what is not applied.
func TestCgroupKeys(t *testing.T) {
	fs, cs := cgroupFlags(2)
	if err := config.Load(fs, nil, env(nil)); err != nil {
		t.Fatal(err)
	}
	c := cs[0]
	if !c.PerQOSFor(config.RuntimeCRI) || !c.PerQOSFor(config.RuntimeSim) || c.PerQOSFor(config.RuntimeProcess) ||
		c.Driver != "cgroupfs" || c.Root != "/" || c.PodPidsLimit != -1 || !c.EnforcePods() {
		t.Errorf("defaults %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		file string
	}{
		{"flag", []string{"--cgroups-per-qos", "--cgroup-driver=systemd", "--cgroup-root=nodes.slice", "--pod-pids-limit=1024", "--enforce-node-allocatable=none"}, nil, ""},
		{"env", nil, map[string]string{"SPLITLET_CGROUPS_PER_QOS": "true", "SPLITLET_CGROUP_DRIVER": "systemd", "SPLITLET_CGROUP_ROOT": "nodes.slice",
			"SPLITLET_POD_PIDS_LIMIT": "1024", "SPLITLET_ENFORCE_NODE_ALLOCATABLE": ""}, ""},
		{"file", nil, nil, "cgroups-per-qos: true\ncgroup-driver: systemd\ncgroup-root: nodes.slice\npod-pids-limit: 1024\nenforce-node-allocatable: []\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, cs := cgroupFlags(2)
			args := tc.args
			if tc.file != "" {
				args = append(args, "--config", writeFile(t, tc.file))
			}
			if err := config.Load(fs, args, env(tc.env)); err != nil {
				t.Fatal(err)
			}
			for i, c := range cs {
				if !c.PerQOSFor(config.RuntimeProcess) || c.Driver != "systemd" || c.Root != "nodes.slice" || c.PodPidsLimit != 1024 || c.EnforcePods() {
					t.Errorf("stage %d: %+v", i, c)
				}
			}
		})
	}
	for _, args := range [][]string{{"--cgroup-driver=docker"}, {"--cgroups-per-qos=maybe"}, {"--pod-pids-limit=0"}, {"--pod-pids-limit=-2"},
		{"--enforce-node-allocatable=pods,system-reserved"}, {"--cgroup-root="}} {
		fs, _ := cgroupFlags(1)
		if err := config.Load(fs, args, env(nil)); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	fs, cs = cgroupFlags(1)
	if err := config.Load(fs, []string{"--cgroups-per-qos=false"}, env(nil)); err != nil || cs[0].PerQOSFor(config.RuntimeCRI) {
		t.Errorf("cgroups-per-qos=false: %+v (%v)", cs[0], err)
	}
}
