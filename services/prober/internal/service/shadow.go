package service

import (
	"fmt"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/runtime"
)

// shadowRecorder is a shadow prober's Event recorder: a shadow writes
// nothing to the API server, so each Event the live prober would record is
// logged at debug level instead.
type shadowRecorder struct{ log *zap.Logger }

func (s shadowRecorder) Event(_ runtime.Object, eventtype, reason, message string) {
	s.log.Debug("shadow: Event not recorded", zap.String("type", eventtype), zap.String("reason", reason), zap.String("message", message))
}

func (s shadowRecorder) Eventf(o runtime.Object, eventtype, reason, format string, args ...any) {
	s.Event(o, eventtype, reason, fmt.Sprintf(format, args...))
}

func (s shadowRecorder) AnnotatedEventf(o runtime.Object, _ map[string]string, eventtype, reason, format string, args ...any) {
	s.Eventf(o, eventtype, reason, format, args...)
}
