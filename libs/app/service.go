package app

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/spf13/pflag"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/discovery"
	"github.com/splitlet/splitlet/libs/health"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/messaging"
)

// Runner is the part of a service that runs: Start must return at once
// (work goes to goroutines bound to a context it keeps); Stop cancels and
// drains that work before it returns.
type Runner interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// Ready is an optional readiness check of a Runner.
type Ready interface {
	Ready(ctx context.Context) error
}

// Partitioned is an optional part of a Runner that owns some of the node's
// partitions (the pod workers): the service API reports them.
type Partitioned interface {
	OwnedPartitions() []int
}

// Identified is an optional part of a Runner whose instance has a name of
// its own (a pod worker's replica id).
type Identified interface {
	ID() string
}

// Replacement is an optional part of a Runner that holds another stage's
// role on the bus (examples/tcpprober in the prober's): the service API
// names it by that role.
type Replacement interface {
	Role() string
}

// RunService hooks a service's Runner into the process lifecycle: it logs the
// service up and stopped, reports it on /readyz, puts it on the NATS service
// API (libs/discovery) once started, and makes the service wait for the bus
// streams before its Start runs. It goes in the stage's module, which gives
// the stage its consumer list (ownConsumers).
func RunService(name string, newRunner any) fx.Option {
	return fx.Options(
		fx.Provide(fx.Annotate(newRunner, fx.As(new(Runner)), fx.ResultTags(`name:"`+name+`"`))),
		fx.Invoke(fx.Annotate(func(lc fx.Lifecycle, r Runner, log *zap.Logger, checks *health.Checks, conn *messaging.Conn, common *config.Common, consumers *bus.Consumers) {
			log = log.With(zap.String(logging.FieldService, name))
			ready := func(context.Context) error { return nil }
			if rc, ok := r.(Ready); ok {
				ready = rc.Ready
			}
			checks.AddReadiness(name, ready)
			stage := discovery.Stage{Name: name, Ready: func(ctx context.Context) bool { return ready(ctx) == nil }, Consumers: consumers}
			if rp, ok := r.(Replacement); ok {
				stage.Name, stage.Implementation = rp.Role(), name
			}
			if common.Shadow {
				// on the service API as the shadow: splitlet-shadow-<stage>.
				stage.Name = bus.ShadowIdentity(stage.Name)
			}
			if p, ok := r.(Partitioned); ok {
				stage.Partitions = p.OwnedPartitions
			}
			var svc micro.Service
			lc.Append(fx.Hook{
				OnStart: func(ctx context.Context) error {
					if err := r.Start(ctx); err != nil {
						return err
					}
					if id, ok := r.(Identified); ok {
						stage.Instance = id.ID()
					}
					var err error
					svc, err = discovery.Serve(conn.NC, discovery.Options{Node: common.NodeName, Version: Version, Stage: stage})
					if err != nil {
						// the stage works without it; `splitlet status` will miss it.
						log.Error("cannot join the NATS service API", zap.Error(err))
					}
					log.Info("service up")
					return nil
				},
				OnStop: func(ctx context.Context) error {
					if svc != nil {
						_ = svc.Stop()
					}
					err := r.Stop(ctx)
					log.Info("service stopped", zap.Error(err))
					return err
				},
			})
		}, fx.ParamTags(``, `name:"`+name+`"`))),
	)
}

// Background runs a service's main loop from Start until Stop, for Runners
// whose work is one long function: Start returns at once, Stop cancels the
// loop and waits until it has drained and returned (or ctx ends).
type Background struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs loop in a goroutine; an error it returns before Stop is logged.
func (b *Background) Start(log *zap.Logger, loop func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel, b.done = cancel, make(chan struct{})
	go func() {
		defer close(b.done)
		if err := loop(ctx); err != nil && ctx.Err() == nil {
			log.Error("service loop stopped on error", zap.Error(err))
		}
	}()
}

// Stop cancels the loop and waits for it to return.
func (b *Background) Stop(ctx context.Context) error {
	if b.cancel == nil {
		return nil
	}
	b.cancel()
	select {
	case <-b.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ownConsumers gives the stage of a module its own consumer list: the
// JetStream handle it is given lists the consumers it runs there, and the
// service API reports their lag, not that of other stages of the process.
var ownConsumers = fx.Options(
	fx.Provide(fx.Private, bus.NewConsumers),
	fx.Decorate(func(js jetstream.JetStream, cs *bus.Consumers) jetstream.JetStream { return bus.WithConsumers(js, cs) }),
)

// Keys are a service's own configuration keys.
type Keys interface {
	RegisterFlags(fs *pflag.FlagSet)
}

// NewService is the Service of a stage whose work is one Runner: keys are
// its own keys (checked by their Validate method, if they have one, before
// anything starts, so that a bad value stops the process naming the key),
// and newRunner is the Runner's fx constructor, which may take keys.
func NewService[K Keys](name string, keys K, newRunner any) Service {
	s := Service{
		Name:  name,
		Flags: keys.RegisterFlags,
		Module: func() fx.Option {
			return fx.Module(name, fx.Supply(keys), ownConsumers, RunService(name, newRunner))
		},
	}
	if v, ok := any(keys).(interface{ Validate() error }); ok {
		s.Validate = v.Validate
	}
	return s
}
