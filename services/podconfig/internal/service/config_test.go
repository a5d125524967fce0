package service

import (
	"strings"
	"testing"
	"time"
)

// TestConfigValidate: the defaults are valid; each bad value is refused with
// an error naming its key.
func TestConfigValidate(t *testing.T) {
	if err := Defaults().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for key, mut := range map[string]func(*Config){
		"podconfig.notification-mode":    func(c *Config) { c.NotificationMode = "sometimes" },
		"podconfig.snapshot-period":      func(c *Config) { c.SnapshotPeriod = 0 },
		"podconfig.file-check-frequency": func(c *Config) { c.FileCheckFrequency = -time.Second },
		"podconfig.manifest-url":         func(c *Config) { c.ManifestURL = "ftp://x/pods" },
		"podconfig.manifest-url-header":  func(c *Config) { c.ManifestURLHeader = []string{"novalue"} },
		"podconfig.api-source is off":    func(c *Config) { c.APISource = false },
		"podconfig.http-check-frequency": func(c *Config) { c.HTTPCheckFrequency = 0 },
		"podconfig.mirror-resync":        func(c *Config) { c.MirrorResync = 0 },
	} {
		c := Defaults()
		mut(c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: error %v", key, err)
		}
	}
}
