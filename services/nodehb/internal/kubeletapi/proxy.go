package kubeletapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/proxy"

	"github.com/splitlet/splitlet/libs/bus"
)

// streamURL asks the pod worker that owns the pod's partition for a URL of
// the runtime's streaming server running the command. It returns the URL;
// or nil and why not, when the runtime has no streaming server (or the pod
// worker predates runtime.stream and nobody answers it), so that the
// command may run over the bus; or an error for a request the runtime
// refused.
func (s *Server) streamURL(ctx context.Context, tg resolved, o *execOptions) (*url.URL, string, error) {
	uid := tg.uid
	req := &bus.StreamRequest{
		ContainerRef: tg.ref(),
		Command:      o.command,
		Attach:       o.attach,
		Stdin:        o.stdin, Stdout: o.stdout, Stderr: o.stderr, TTY: o.tty,
	}
	rctx, cancel := context.WithTimeout(ctx, s.reqTTL+2*time.Second)
	defer cancel()
	subject := s.subj.Stream(s.partition(uid))
	e, err := s.cfg.Bus.Request(rctx, subject, bus.KindStreamRequest, req)
	if errors.Is(err, nats.ErrNoResponders) {
		what := "tty"
		if o.attach {
			what = "attach"
		}
		return nil, fmt.Sprintf("%s: not supported by this agent: no pod worker serves streams on %s", what, subject), nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("no answer from the pod worker on %s: %w", subject, err)
	}
	res, err := bus.DecodeStreamResult(e)
	if err != nil {
		return nil, "", err
	}
	if res.Unsupported {
		return nil, res.Error, nil
	}
	if res.Error != "" {
		return nil, "", errors.New(res.Error)
	}
	u, err := parseStreamURL(res.URL)
	return u, "", err
}

// parseStreamURL checks that the URL a pod worker gave is an http(s) URL.
func parseStreamURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("the runtime's stream URL %q is not an http(s) URL", s)
	}
	return u, nil
}

// proxyStream hands the client's connection to the runtime's streaming
// server, upgrade included (kubelet: proxyStream with the upgrade-aware
// handler). The runtime's server speaks the remote command protocol with the
// client from here on; nodehb only copies bytes. The URL is usually on
// 127.0.0.1 of the node (containerd's stream_server_address default): this
// works only while nodehb runs on the node's host.
func (s *Server) proxyStream(w http.ResponseWriter, r *http.Request, target *url.URL) {
	h := proxy.NewUpgradeAwareHandler(target, nil, false, true, proxyResponder{s.log})
	h.ServeHTTP(w, r)
}

type proxyResponder struct{ log *zap.Logger }

func (p proxyResponder) Error(w http.ResponseWriter, r *http.Request, err error) {
	p.log.Info("proxying a stream to the runtime failed", zap.String("path", r.URL.Path), zap.Error(err))
	http.Error(w, err.Error(), http.StatusInternalServerError)
}
