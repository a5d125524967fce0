// Package service is the nodehb stage's runner.
package service

import (
	"context"

	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
)

// Config holds the nodehb keys.
type Config struct{}

// RegisterFlags adds the nodehb keys ("nodehb.<key>") to fs.
func (c *Config) RegisterFlags(fs *pflag.FlagSet) {}

// Runner is the running stage.
type Runner struct {
	log  *zap.Logger
	kube kubernetes.Interface
}

// New builds the stage.
func New(_ *Config, log *zap.Logger, kube kubernetes.Interface) *Runner {
	return &Runner{log: log.Named("nodehb"), kube: kube}
}

// Start returns at once; the stage's loops run in the background.
func (r *Runner) Start(context.Context) error { return nil }

// Stop drains the stage's work.
func (r *Runner) Stop(context.Context) error { return nil }
