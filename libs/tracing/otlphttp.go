package tracing

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/splitlet/splitlet/libs/protofields"
)

// otlpHTTP is the span exporter's transport (an otlptrace.Client): OTLP/HTTP
// with binary protobuf bodies, POSTed to the collector's /v1/traces.
//
// Why not otlptracehttp: its package links the OTLP collector service's
// generated code, and with it gRPC and the gRPC gateway, into every binary
// that can trace, for a client that never speaks gRPC. In a stage that
// needs no gRPC of its own (nodehb, podconfig, statussync: not the pod
// workers, whose CRI client is gRPC, nor the prober, which runs gRPC
// probes) that was 25 MB of a 68 MB binary and 12 to 13 MiB of resident
// pages, whether tracing was on or off (their package init runs anyway;
// make bench, "executables' pages"). The exporter itself (otlptrace: the
// batching, the spans' protobuf form) is OpenTelemetry's; only the HTTP
// request is written here, as the OTLP specification describes it.
type otlpHTTP struct {
	url    string
	client *http.Client
	// retryBase is the first wait before a retryable failure is retried;
	// it doubles up to retryMax, for as long as the export's context lasts.
	retryBase, retryMax time.Duration
}

// newOTLPHTTP returns the transport for a tracing-endpoint: a URL, whose
// path gets /v1/traces, or host:port, spoken to over plain HTTP.
func newOTLPHTTP(endpoint string) (*otlpHTTP, error) {
	url := endpoint
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	if u, err := neturl.Parse(url); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("invalid tracing-endpoint %q: an http or https URL, or host:port", endpoint)
	}
	url = strings.TrimSuffix(url, "/")
	tr, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return nil, errors.New("tracing: the default HTTP transport is not an *http.Transport")
	}
	return &otlpHTTP{
		url:       url + "/v1/traces",
		client:    &http.Client{Transport: tr.Clone()},
		retryBase: 500 * time.Millisecond,
		retryMax:  5 * time.Second,
	}, nil
}

func (c *otlpHTTP) Start(context.Context) error { return nil }

func (c *otlpHTTP) Stop(context.Context) error {
	c.client.CloseIdleConnections()
	return nil
}

// UploadTraces sends one ExportTraceServiceRequest. Throttling and an
// unavailable collector (429, 502, 503, 504) are retried with back-off,
// after the server's Retry-After when it sends one, until ctx ends (the
// OTLP/HTTP specification's retryable responses); any other failure is
// returned at once.
func (c *otlpHTTP) UploadTraces(ctx context.Context, spans []*tracepb.ResourceSpans) error {
	body, err := exportRequest(spans)
	if err != nil {
		return fmt.Errorf("tracing: encode spans: %w", err)
	}
	wait := c.retryBase
	for {
		retryAfter, err := c.post(ctx, body)
		if err == nil {
			return nil
		}
		var r retryable
		if !errors.As(err, &r) {
			return err
		}
		if retryAfter <= 0 {
			retryAfter = wait
			wait = min(2*wait, c.retryMax)
		}
		t := time.NewTimer(retryAfter)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (gave up: %w)", err, ctx.Err())
		case <-t.C:
		}
	}
}

// retryable marks a failure the specification says to retry.
type retryable struct{ error }

func (r retryable) Unwrap() error { return r.error }

// post sends body once; a retryable failure comes with the server's
// Retry-After, if any.
func (c *otlpHTTP) post(ctx context.Context, body []byte) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := c.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, err
		}
		// a connection refused or reset: the collector may come back.
		return 0, retryable{fmt.Errorf("tracing: export to %s: %w", c.url, err)}
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		if rejected, msg := partialSuccess(data); rejected > 0 || msg != "" {
			// the spans that were taken stay taken: report, do not resend.
			otel.Handle(fmt.Errorf("tracing: the collector rejected %d spans: %s", rejected, msg))
		}
		return 0, nil
	case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusBadGateway,
		resp.StatusCode == http.StatusServiceUnavailable, resp.StatusCode == http.StatusGatewayTimeout:
		var after time.Duration
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			after = time.Duration(s) * time.Second
		}
		return after, retryable{fmt.Errorf("tracing: export to %s: %s", c.url, resp.Status)}
	default:
		return 0, fmt.Errorf("tracing: export to %s: %s: %s", c.url, resp.Status, strings.TrimSpace(string(data)))
	}
}

// exportRequest encodes an ExportTraceServiceRequest, whose only field is
// resource_spans = 1 (repeated ResourceSpans).
func exportRequest(spans []*tracepb.ResourceSpans) ([]byte, error) {
	var out []byte
	for _, rs := range spans {
		m, err := proto.Marshal(rs)
		if err != nil {
			return nil, err
		}
		out = protowire.AppendTag(out, 1, protowire.BytesType)
		out = protowire.AppendBytes(out, m)
	}
	return out, nil
}

// partialSuccess reads an ExportTraceServiceResponse's partial_success = 1
// (rejected_spans = 1, error_message = 2); a body it cannot read counts as
// full success, as an empty one does.
func partialSuccess(body []byte) (rejected int64, msg string) {
	err := protofields.Walk(body, func(n protowire.Number, _ uint64, ps []byte) error {
		if n != 1 || ps == nil {
			return nil
		}
		return protofields.Walk(ps, func(n protowire.Number, v uint64, data []byte) error {
			switch {
			case n == 1 && data == nil:
				rejected = int64(v)
			case n == 2 && data != nil:
				msg = string(data)
			}
			return nil
		})
	})
	if err != nil {
		return 0, ""
	}
	return rejected, msg
}
