package source

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/services/podconfig/internal/manifest"
	"github.com/splitlet/splitlet/services/podconfig/internal/merge"
)

// HTTP is the manifest URL source: a Pod or a PodList, fetched at start and
// every period, reported as a SET when it changed. When the URL cannot be
// reached or serves something unusable, the last good state stays and the
// next period tries again (kubelet: sourceURL).
type HTTP struct {
	url string
	// shown is url as logs, Events and errors show it (logging.RedactURL).
	shown    string
	header   http.Header
	node     string
	period   time.Duration
	sink     Sink
	log      *zap.Logger
	recorder record.EventRecorder
	client   *http.Client
	last     []byte
	lastErr  string
	failures int
}

// NewHTTP builds the source; Run runs it.
func NewHTTP(url string, header http.Header, node string, period time.Duration, sink Sink, recorder record.EventRecorder, log *zap.Logger) *HTTP {
	return &HTTP{url: url, shown: logging.RedactURL(url), header: header, node: node, period: period, sink: sink, log: log, recorder: recorder,
		client: &http.Client{Timeout: 10 * time.Second}}
}

// Run polls until ctx ends.
func (h *HTTP) Run(ctx context.Context) {
	wait.NonSlidingUntilWithContext(ctx, h.poll, h.period)
}

// poll reads the URL once.
func (h *HTTP) poll(ctx context.Context) {
	if err := h.fetch(ctx); err != nil && ctx.Err() == nil {
		h.failed(err)
	} else if err == nil {
		if h.failures > 0 {
			h.log.Info("manifest URL readable again", zap.String("url", h.shown))
		}
		h.failures, h.lastErr = 0, ""
	}
}

func (h *HTTP) failed(err error) {
	h.failures++
	// kubelet: say it a few times, then more quietly.
	if h.failures <= 3 {
		h.log.Warn("cannot read pods from the manifest URL, keeping the last good state", zap.String("url", h.shown), zap.Error(err))
	} else {
		h.log.Debug("cannot read pods from the manifest URL, keeping the last good state", zap.String("url", h.shown), zap.Error(err))
	}
	if msg := err.Error(); msg != h.lastErr {
		h.lastErr = msg
		if h.recorder != nil {
			h.recorder.Eventf(kube.NodeRef(h.node), corev1.EventTypeWarning, ReasonInvalidManifest,
				"Manifest URL %s: %s", h.shown, msg)
		}
	}
}

func (h *HTTP) fetch(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url, nil)
	if err != nil {
		return err
	}
	for k, vs := range h.header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return logging.RedactURLError(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, manifest.MaxSize+1))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", h.shown, resp.Status)
	}
	if len(data) == 0 {
		// kubelet: an empty answer is an empty source, so it can be seen.
		h.last = data
		h.sink.Submit(merge.Update{Source: merge.SourceHTTP, Op: bus.OpSet, Pods: []*corev1.Pod{}})
		return nil
	}
	if h.last != nil && bytes.Equal(data, h.last) {
		return nil
	}
	pods, err := manifest.Decode(data, manifest.Origin{Node: h.node, URL: h.url}, false)
	if err != nil {
		return fmt.Errorf("%s: %w", h.shown, err)
	}
	h.last = data
	h.sink.Submit(merge.Update{Source: merge.SourceHTTP, Op: bus.OpSet, Pods: pods})
	return nil
}
