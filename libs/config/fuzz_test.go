package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// FuzzLoad: whatever a --config YAML file holds, Load sets the keys or
// returns an error; it never panics.
func FuzzLoad(f *testing.F) {
	for _, seed := range []string{
		"node-name: n1\nlog-level: debug\n",
		"podconfig: {snapshot-period: 30s}\npartitions: 8\n",
		"partitions: [1, 2]\n", "node-name: {a: b}\n", ": :\n", "\t- x", "~", "shutdown-timeout: -1s\n",
		"a: &x [*x]\n",
	} {
		f.Add([]byte(seed))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		fs := pflag.NewFlagSet("fuzz", pflag.ContinueOnError)
		fs.SetOutput(discard{})
		var c Common
		c.RegisterFlags(fs)
		var period time.Duration
		fs.DurationVar(&period, "podconfig.snapshot-period", time.Minute, "")
		if err := Load(fs, []string{"--config=" + path}, func(string) (string, bool) { return "", false }); err != nil {
			return
		}
		_ = c.Complete()
	})
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
