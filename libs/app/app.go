// Package app runs Splitlet services: one binary, any set of services, the
// same code either way. Each service is an fx module; Run parses the shared
// keys and the services' own keys, builds the process's common parts (logger,
// NATS, Kubernetes client, health and metrics server) and runs the modules
// until a signal or an error.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"go.uber.org/zap"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/logging"
)

// Version is Splitlet's version, stamped at build time
// (-ldflags -X github.com/splitlet/splitlet/libs/app.Version=...).
var Version = "v0.1.0-dev"

// Service is one stage that a binary can run.
type Service struct {
	// Name is the service's name, as --services takes it.
	Name string
	// Identity is the bus identity the stage connects as (docs/bus.md's
	// permission table), when it is not Name: a replacement stage in a
	// role (examples/tcpprober is a prober).
	Identity string
	// Flags registers the service's own keys, named "<name>.<key>".
	Flags func(fs *pflag.FlagSet)
	// Module returns the service's fx module; it is called after the keys
	// are loaded, so it may read them.
	Module func() fx.Option
	// Validate, if set, checks the service's keys once they are loaded; an
	// error stops the process (exit 2) before anything starts.
	Validate func() error
	// Shadow: the service has a shadow mode (the shadow key; docs/bus.md,
	// "Shadow stages"). A process asked to run a service without one as a
	// shadow refuses to start.
	Shadow bool
	// MemoryPerPod is what the service's memory budget allows a pod of the
	// node, in bytes, on top of a base every service gets (memory-limit
	// auto without a cgroup limit: MemoryBudget).
	MemoryPerPod int64
	// NodeCredentials marks the service whose process keeps the node's
	// API server credentials (nodehb): TLS bootstrap and the rotation of
	// the client certificate run in that process alone, the one writer of
	// cert-dir's client pair.
	NodeCredentials bool
}

// Main runs the binary and exits with Run's code.
func Main(binary string, services ...Service) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := Run(ctx, binary, os.Args[1:], os.Stderr, services...)
	stop()
	os.Exit(code)
}

// Run parses args, starts the chosen services and blocks until ctx ends or a
// service asks the process to stop; then it stops everything within the
// shutdown timeout. It returns the process exit code: 0 after a clean stop,
// 2 for bad flags or configuration, 1 for a failure to start or stop.
func Run(ctx context.Context, binary string, args []string, stderr io.Writer, services ...Service) int {
	a, code, done := parseArgs(binary, args, stderr, services)
	if done {
		return code
	}
	common := a.common
	if a.healthcheck {
		return checkHealth(ctx, binary, common, stderr)
	}
	run, owner, err := selectServices(common, services, a.selected)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", binary, err)
		return 2
	}
	log, err := logging.New(common.LogLevel, common.LogFormat)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", binary, err)
		return 2
	}
	defer func() { _ = log.Sync() }()
	log = log.With(zap.String(logging.FieldNode, common.NodeName))
	applyMemoryLimit(common.MemoryLimit, MemoryBudget(common, run), log)
	if bool(owner) && common.BootstrapKubeconfig != "" {
		if err := ensureClientCert(ctx, common, binary, log); err != nil {
			log.Error("no client certificate for the node", zap.Error(err))
			fmt.Fprintf(stderr, "%s: %v\n", binary, err)
			return 1
		}
	}
	return serve(ctx, binary, common, run, owner, log, stderr)
}

// runArgs is what Run's flags ask for.
type runArgs struct {
	common      *config.Common
	selected    []string
	healthcheck bool
}

// parseArgs registers the common and the services' flags and loads them
// from args, the environment and the config file; done with the exit code
// when the process ends here (help, version, a bad flag).
func parseArgs(binary string, args []string, stderr io.Writer, services []Service) (*runArgs, int, bool) {
	fs := pflag.NewFlagSet(binary, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = true
	a := &runArgs{common: &config.Common{}, selected: []string{"all"}}
	a.common.RegisterFlags(fs)
	names := make([]string, len(services))
	for i, s := range services {
		names[i] = s.Name
	}
	if len(services) > 1 {
		fs.StringSliceVar(&a.selected, "services", a.selected, "services to run in this process: all, or a comma-separated list of "+strings.Join(names, ", "))
	}
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.BoolVar(&a.healthcheck, "healthcheck", false, "check the /readyz of this binary's running process (at http-addr when its port is fixed, else at the address it wrote to <data-dir>/<binary>.http-addr) and exit 0 when ready, 1 when not: a container health check for images with no shell")
	for _, s := range services {
		if s.Flags != nil {
			s.Flags(fs)
		}
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s [flags]\n\n%s is part of Splitlet %s. Every flag can also be set as %s<KEY> or as a key in the --config YAML file.\n\nFlags:\n%s",
			binary, binary, Version, config.EnvPrefix, fs.FlagUsages())
	}
	if err := config.Load(fs, args, nil); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil, 0, true
		}
		fmt.Fprintf(stderr, "%s: %v\n", binary, err)
		return nil, 2, true
	}
	if *showVersion {
		fmt.Fprintf(stderr, "%s %s\n", binary, Version)
		return nil, 0, true
	}
	if err := a.common.Complete(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", binary, err)
		return nil, 2, true
	}
	return a, 0, false
}

// selectServices picks the services to run and checks their configuration.
func selectServices(common *config.Common, services []Service, selected []string) ([]Service, CredentialsOwner, error) {
	run, err := choose(services, selected)
	if err != nil {
		return nil, false, err
	}
	if err := checkShadow(common, run); err != nil {
		return nil, false, err
	}
	for _, s := range run {
		if s.Validate == nil {
			continue
		}
		if err := s.Validate(); err != nil {
			return nil, false, err
		}
	}
	owner := CredentialsOwner(slices.ContainsFunc(run, func(s Service) bool { return s.NodeCredentials }))
	if common.BootstrapKubeconfig != "" && !owner {
		return nil, false, errors.New("bootstrap-kubeconfig: only the process that runs nodehb asks for the node's certificate; give this one kubeconfig=<the kubeconfig nodehb writes>")
	}
	return run, owner, nil
}

// serve assembles the services into one fx application, starts it, waits
// for ctx to end or a service to ask the process to stop, and stops it.
func serve(ctx context.Context, binary string, common *config.Common, run []Service, owner CredentialsOwner, log *zap.Logger, stderr io.Writer) int {
	opts := []fx.Option{
		fx.WithLogger(func() fxevent.Logger { return logging.FxLogger(log) }),
		fx.Supply(common, log, Binary(binary), busIdentity(run, common.Shadow), owner),
		Core,
		fx.StartTimeout(60 * time.Second),
		fx.StopTimeout(common.ShutdownTimeout),
	}
	if bool(owner) && common.RotateCertificates {
		opts = append(opts, fx.Invoke(runClientRotation))
	}
	started := make([]string, 0, len(run))
	for _, s := range run {
		opts = append(opts, s.Module())
		started = append(started, s.Name)
	}
	fxApp := fx.New(opts...)
	if err := fxApp.Err(); err != nil {
		log.Error("cannot assemble services", zap.Error(err))
		fmt.Fprintf(stderr, "%s: %v\n", binary, err)
		return 1
	}
	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := fxApp.Start(startCtx); err != nil {
		log.Error("start failed", zap.Error(err))
		fmt.Fprintf(stderr, "%s: start: %v\n", binary, err)
		stopCtx, cancelStop := context.WithTimeout(context.Background(), common.ShutdownTimeout)
		defer cancelStop()
		_ = fxApp.Stop(stopCtx)
		return 1
	}
	log.Info("splitlet up", zap.String("binary", binary), zap.Strings("services", started), zap.String("version", Version))
	code := 0
	select {
	case <-ctx.Done():
		log.Info("signal received, stopping")
	case sig := <-fxApp.Wait():
		log.Info("a service asked to stop", zap.Int("exitCode", sig.ExitCode))
		code = sig.ExitCode
	}
	stopCtx, cancelStop := context.WithTimeout(context.Background(), common.ShutdownTimeout)
	defer cancelStop()
	if err := fxApp.Stop(stopCtx); err != nil {
		log.Error("stop failed", zap.Error(err))
		return 1
	}
	log.Info("stopped cleanly")
	return code
}

// CredentialsOwner tells whether this process keeps the node's API server
// credentials (runs the service marked NodeCredentials).
type CredentialsOwner bool

// Binary is the name of the running binary, for fx consumers.
type Binary string

// BusIdentity is the bus identity of a process that runs one stage (its
// connection's inboxes are that stage's, or its shadow's); empty when it
// runs several.
type BusIdentity string

func busIdentity(run []Service, shadow bool) BusIdentity {
	if len(run) != 1 {
		return ""
	}
	id := run[0].Identity
	if id == "" {
		id = run[0].Name
	}
	if !slices.Contains(bus.Stages, id) {
		return ""
	}
	if shadow {
		return BusIdentity(bus.ShadowIdentity(id))
	}
	return BusIdentity(id)
}

// checkShadow refuses the shadow key for a service that has no shadow
// mode: it would run live.
func checkShadow(common *config.Common, run []Service) error {
	if !common.Shadow {
		return nil
	}
	for _, s := range run {
		if !s.Shadow {
			return fmt.Errorf("invalid value true for shadow: service %s has no shadow mode (stages with one: %s)", s.Name, strings.Join(bus.ShadowStages, ", "))
		}
	}
	return nil
}

func choose(services []Service, selected []string) ([]Service, error) {
	if len(services) == 1 {
		return services, nil
	}
	if len(selected) == 0 {
		return nil, errors.New("invalid value for services: empty")
	}
	if slices.Contains(selected, "all") {
		if len(selected) > 1 {
			return nil, errors.New(`invalid value for services: "all" cannot be combined with names`)
		}
		return services, nil
	}
	var out []Service
	for _, name := range selected {
		i := slices.IndexFunc(services, func(s Service) bool { return s.Name == name })
		if i < 0 {
			all := make([]string, len(services))
			for j, s := range services {
				all[j] = s.Name
			}
			return nil, fmt.Errorf("invalid value %q for services: unknown service (have all, %s)", name, strings.Join(all, ", "))
		}
		if !slices.ContainsFunc(out, func(s Service) bool { return s.Name == name }) {
			out = append(out, services[i])
		}
	}
	return out, nil
}
