// Package logging builds the zap logger of a Splitlet process and routes the
// other loggers it hosts (fx's events, client-go's klog) into it.
package logging

import (
	"fmt"

	"github.com/go-logr/zapr"
	"go.uber.org/fx/fxevent"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
)

// Standard field names, so that every stage logs the same keys.
const (
	FieldPod     = "pod"
	FieldUID     = "uid"
	FieldNode    = "node"
	FieldSubject = "subject"
	FieldService = "service"
)

// New builds a logger at the given level ("debug", "info", "warn", "error")
// in the given format ("json" or "console") and routes klog into it.
func New(level, format string) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log-level: %w", err)
	}
	cfg := zap.NewProductionConfig()
	if format == "console" {
		cfg = zap.NewDevelopmentConfig()
		cfg.Development = false
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.Sampling = nil
	cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	log, err := cfg.Build()
	if err != nil {
		return nil, err
	}
	RouteKlog(log)
	return log, nil
}

// RouteKlog sends klog's output (client-go's logging) to log.
func RouteKlog(log *zap.Logger) {
	klog.SetLogger(zapr.NewLogger(log.Named("klog")))
}

// FxLogger routes fx's own events into log, at debug level for the chatter
// and error level for failures.
func FxLogger(log *zap.Logger) fxevent.Logger {
	l := &fxevent.ZapLogger{Logger: log.Named("fx")}
	l.UseLogLevel(zapcore.DebugLevel)
	l.UseErrorLevel(zapcore.ErrorLevel)
	return l
}

// Pod returns the standard fields that name a pod.
func Pod(namespace, name, uid string) []zap.Field {
	return []zap.Field{zap.String(FieldPod, namespace+"/"+name), zap.String(FieldUID, uid)}
}
