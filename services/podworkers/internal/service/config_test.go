package service

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// The image pull keys are checked as the kubelet checks them: parallel
// pulls above 1 need serial pulls off; the credential provider config and
// bin directory go together.
func TestImagePullKeysValidated(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"defaults", func(*Config) {}, ""},
		{"parallel with serial pulls", func(c *Config) { c.MaxParallelPulls = 3 }, "podworkers.max-parallel-image-pulls"},
		{"parallel", func(c *Config) { c.SerializeImagePulls, c.MaxParallelPulls = false, 3 }, ""},
		{"negative", func(c *Config) { c.SerializeImagePulls, c.MaxParallelPulls = false, -1 }, "podworkers.max-parallel-image-pulls"},
		{"provider config alone", func(c *Config) { c.CredentialProviderConfig = "/etc/cp.yaml" }, "podworkers.image-credential-provider-bin-dir"},
		{"provider bin dir alone", func(c *Config) { c.CredentialProviderBinDir = "/usr/libexec/cp" }, "podworkers.image-credential-provider-config"},
	} {
		cfg := defaults(t)
		if !cfg.SerializeImagePulls {
			t.Fatal("serialize-image-pulls is off by default; the kubelet's default is on")
		}
		c.mod(cfg)
		err := cfg.Validate()
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
	}
}

// The on/off/auto keys are parsed where they are read: a bad word is an
// error of the flag set, naming the key and its spellings.
func TestSwitchKeysRefuseOtherWords(t *testing.T) {
	for _, key := range []string{"podworkers.container-events", "podworkers.volumes"} {
		cfg := &Config{}
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		fs.SetOutput(new(strings.Builder))
		cfg.RegisterFlags(fs)
		if f := fs.Lookup(key); f == nil || f.DefValue != "auto" {
			t.Fatalf("%s: default %v, want auto", key, f)
		}
		err := fs.Parse([]string{"--" + key + "=yes"})
		if err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "on, off or auto") {
			t.Errorf("%s=yes: %v, want an error naming the key and on, off or auto", key, err)
		}
		if err := fs.Parse([]string{"--" + key + "=off"}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := defaults(t)
	if !cfg.ContainerEvents.On(true) || cfg.ContainerEvents.On(false) || !cfg.Volumes.On(true) || cfg.Volumes.On(false) {
		t.Errorf("the defaults are not auto: %v, %v", cfg.ContainerEvents, cfg.Volumes)
	}
}

// podworkers.host-ip is parsed once, in Validate: an address a node can
// have is taken (the runtimes and the statuses get its text), anything else
// is refused naming the key.
func TestHostIPValidated(t *testing.T) {
	for _, c := range []struct {
		in, want string // want: the address taken, or "" for a refusal
	}{
		{"127.0.0.1", "127.0.0.1"},
		{"10.1.0.4", "10.1.0.4"},
		{"2001:DB8::1", "2001:db8::1"},
		{"::1", "::1"},
		{"", ""},
		{"localhost", ""},
		{"10.1.0", ""},
		{"10.1.0.4/24", ""},
		{" 10.1.0.4", ""},
		{"0.0.0.0", ""},
		{"::", ""},
		{"fe80::1%eth0", ""},
	} {
		cfg := defaults(t)
		cfg.HostIP = c.in
		err := cfg.Validate()
		switch {
		case c.want == "" && (err == nil || !strings.Contains(err.Error(), "podworkers.host-ip")):
			t.Errorf("%q: %v, want an error naming podworkers.host-ip", c.in, err)
		case c.want != "" && err != nil:
			t.Errorf("%q: %v", c.in, err)
		case c.want != "" && cfg.hostIP.String() != c.want:
			t.Errorf("%q: parsed as %v, want %s", c.in, cfg.hostIP, c.want)
		}
	}
}
