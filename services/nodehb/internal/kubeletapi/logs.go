package kubeletapi

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/logging"
)

// parseLogOptions reads the kubelet's log query (PodLogOptions), refusing
// what the API would refuse.
func parseLogOptions(r *http.Request) (*bus.LogsRequest, error) {
	q := r.URL.Query()
	req := &bus.LogsRequest{}
	for _, b := range []struct {
		name string
		dst  *bool
	}{{"follow", &req.Follow}, {"previous", &req.Previous}, {"timestamps", &req.Timestamps}} {
		if v := q.Get(b.name); v != "" {
			x, err := strconv.ParseBool(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %q is not a boolean", b.name, v)
			}
			*b.dst = x
		}
	}
	ints := []struct {
		name string
		dst  **int64
		min  int64
	}{{"tailLines", &req.TailLines, 0}, {"sinceSeconds", &req.SinceSeconds, 1}, {"limitBytes", &req.LimitBytes, 1}}
	for _, n := range ints {
		v := q.Get(n.name)
		if v == "" {
			continue
		}
		x, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not an integer", n.name, v)
		}
		if x < n.min {
			return nil, fmt.Errorf("%s: must be at least %d", n.name, n.min)
		}
		*n.dst = &x
	}
	if v := q.Get("sinceTime"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return nil, fmt.Errorf("sinceTime: %q is not an RFC 3339 time", v)
		}
		mt := metav1.NewTime(t)
		req.SinceTime = &mt
	}
	if req.SinceSeconds != nil && req.SinceTime != nil {
		return nil, fmt.Errorf("at most one of sinceSeconds or sinceTime may be specified")
	}
	return req, nil
}

// lazyWriter writes the 200 header on the first byte, so that an error
// before any output can still be a proper error status; it flushes every
// write so that a followed log streams.
type lazyWriter struct {
	w       http.ResponseWriter
	started bool
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	if !l.started {
		l.w.Header().Set("Content-Type", "text/plain")
		l.w.WriteHeader(http.StatusOK)
		l.started = true
	}
	n, err := l.w.Write(p)
	if f, ok := l.w.(http.Flusher); ok {
		f.Flush()
	}
	return n, err
}

// handleLogs serves /containerLogs/{namespace}/{pod}/{container} through the
// runtime's logs request of the pod's partition.
func (s *Server) handleLogs(w http.ResponseWriter, r *http.Request) {
	req, err := parseLogOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	tg, ok := s.lookup(w, r)
	if !ok {
		return
	}
	pod, container, uid := tg.pod, tg.container, tg.uid
	req.ContainerRef = tg.ref()
	subject := s.subj.Logs(s.partition(uid))
	lw := &lazyWriter{w: w}
	err = s.cfg.Bus.RequestLogs(r.Context(), subject, req, lw)
	if err != nil && r.Context().Err() == nil {
		log := s.log.With(logging.Pod(pod.Namespace, pod.Name, uid)...)
		log.Info("container logs failed", zap.String("container", container), zap.String(logging.FieldSubject, subject), zap.Error(err))
		if !lw.started {
			code := http.StatusInternalServerError
			if strings.Contains(err.Error(), "no pod worker answered") {
				code = http.StatusServiceUnavailable
			}
			http.Error(w, fmt.Sprintf("failed to get logs of container %q in pod %q: %v", container, pod.Namespace+"/"+pod.Name, err), code)
			return
		}
	}
	if !lw.started {
		_, _ = lw.Write(nil)
	}
}
