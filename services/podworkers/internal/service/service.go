// Package service is the podworkers stage's runner.
package service

import (
	"context"

	"github.com/spf13/pflag"
	"go.uber.org/zap"
)

// Config holds the podworkers keys.
type Config struct{}

// RegisterFlags adds the podworkers keys ("podworkers.<key>") to fs.
func (c *Config) RegisterFlags(fs *pflag.FlagSet) {}

// Runner is the running stage.
type Runner struct {
	log *zap.Logger
}

// New builds the stage.
func New(_ *Config, log *zap.Logger) *Runner {
	return &Runner{log: log.Named("podworkers")}
}

// Start returns at once; the stage's loops run in the background.
func (r *Runner) Start(context.Context) error { return nil }

// Stop drains the stage's work.
func (r *Runner) Stop(context.Context) error { return nil }
