package service

import (
	"time"

	"github.com/spf13/pflag"
)

// Config holds the prober keys.
type Config struct {
	// Instance names this prober on the bus (the envelope's source).
	Instance string
	// ExecGrace is how long past a probe's timeout the prober waits for the
	// runtime's answer to an exec request before it counts the probe as
	// timed out.
	ExecGrace time.Duration
}

// RegisterFlags adds the prober keys ("prober.<key>") to fs.
func (c *Config) RegisterFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.Instance, "prober.instance", "prober", "the prober's name on the bus (source of its ProbeResult messages)")
	fs.DurationVar(&c.ExecGrace, "prober.exec-grace", 2*time.Second, "extra wait past an exec probe's timeout for the runtime's answer")
}
