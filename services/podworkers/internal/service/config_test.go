package service

import (
	"strings"
	"testing"
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
