package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/splitlet/splitlet/libs/config"
)

func gcFlags() (*pflag.FlagSet, *config.GC) {
	g := &config.GC{}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	fs.String(config.FileKey, "", "")
	g.RegisterFlags(fs)
	return fs, g
}

// The garbage collection keys default to the kubelet's values and come
// from a flag, the environment or the YAML file as typed values.
func TestGCKeys(t *testing.T) {
	fs, g := gcFlags()
	if err := config.Load(fs, nil, env(nil)); err != nil {
		t.Fatal(err)
	}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	want := config.GC{MaxDeadPerContainer: 1, ContainerPeriod: time.Minute, ContainerLogMaxSize: 10 << 20, ContainerLogMaxFiles: 5,
		ContainerLogMonitorInterval: 10 * time.Second, ContainerLogMaxWorkers: 1, ImageGCHigh: 85, ImageGCLow: 80,
		ImageMinAge: 2 * time.Minute, ImagePeriod: 5 * time.Minute}
	if !sameGC(*g, want) {
		t.Errorf("defaults %+v, want %+v", *g, want)
	}
	args := []string{"--container-log-max-size=1Ki", "--minimum-container-ttl-duration=30s"}
	file := "image-gc-high-threshold: 90\nimage-maximum-gc-age: 1h\n"
	fs, g = gcFlags()
	if err := config.Load(fs, append(args, "--config", writeFile(t, file)), env(map[string]string{"SPLITLET_CONTAINER_LOG_MAX_FILES": "3"})); err != nil {
		t.Fatal(err)
	}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	if g.ContainerLogMaxSize != 1024 || g.MinContainerTTL != 30*time.Second || g.ContainerLogMaxFiles != 3 || g.ImageGCHigh != 90 || g.ImageMaxAge != time.Hour {
		t.Errorf("set keys %+v", *g)
	}
}

func sameGC(a, b config.GC) bool {
	return a.MinContainerTTL == b.MinContainerTTL && a.MaxDeadPerContainer == b.MaxDeadPerContainer && a.ContainerPeriod == b.ContainerPeriod &&
		a.ContainerLogMaxSize == b.ContainerLogMaxSize && a.ContainerLogMaxFiles == b.ContainerLogMaxFiles &&
		a.ContainerLogMonitorInterval == b.ContainerLogMonitorInterval && a.ContainerLogMaxWorkers == b.ContainerLogMaxWorkers &&
		a.ImageGCHigh == b.ImageGCHigh && a.ImageGCLow == b.ImageGCLow && a.ImageMinAge == b.ImageMinAge &&
		a.ImageMaxAge == b.ImageMaxAge && a.ImagePeriod == b.ImagePeriod
}

// A value the kubelet would refuse stops the start, naming the key.
func TestGCKeysRejectBadValues(t *testing.T) {
	for _, c := range []struct {
		args []string
		key  string
	}{
		{[]string{"--container-log-max-size=lots"}, "container-log-max-size"},
		{[]string{"--container-log-max-size=0"}, "container-log-max-size"},
		{[]string{"--container-log-max-files=1"}, "container-log-max-files"},
		{[]string{"--container-log-monitor-interval=1s"}, "container-log-monitor-interval"},
		{[]string{"--container-log-max-workers=0"}, "container-log-max-workers"},
		{[]string{"--image-gc-high-threshold=101"}, "image-gc-high-threshold"},
		{[]string{"--image-gc-low-threshold=90"}, "image-gc-low-threshold"},
		{[]string{"--image-maximum-gc-age=1m"}, "image-maximum-gc-age"},
		{[]string{"--minimum-container-ttl-duration=-1s"}, "minimum-container-ttl-duration"},
	} {
		fs, g := gcFlags()
		err := config.Load(fs, c.args, env(nil))
		if err == nil {
			err = g.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%v: %v, want an error naming %s", c.args, err, c.key)
		}
	}
}
