package probe

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/kube"
)

// HTTP runs httpGet probes. One value serves every worker: it holds the
// transport, which keeps no connections (every probe dials anew, as the
// kubelet's does).
type HTTP struct {
	transport *http.Transport
}

// NewHTTP returns an HTTP prober. TLS certificates are not verified
// (kubelet rule: probes skip verification).
func NewHTTP() *HTTP {
	return &HTTP{transport: &http.Transport{
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // kubelet rule: probes do not verify certificates
		DisableKeepAlives:   true,
		DisableCompression:  true,
		Proxy:               http.ProxyURL(nil),
		DialContext:         sharedDialer.DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
	}}
}

// Request builds a probe's GET (kube.HTTPGetRequest) with the kubelet's
// probe User-Agent.
func Request(action *corev1.HTTPGetAction, c *corev1.Container, podIP string) (*http.Request, error) {
	return kube.HTTPGetRequest(action, c, podIP, UserAgent)
}

// Probe sends req and judges the answer: 200 to 399 is healthy. Redirects
// to the same host are followed (at most 10); a redirect to another host is
// not followed and counts as healthy with a Warning (kubelet rule).
func (p *HTTP) Probe(ctx context.Context, req *http.Request, timeout time.Duration) (Result, string) {
	// The client's own timeout bounds the whole exchange (and words the
	// failure as the kubelet's does); ctx only cancels on shutdown.
	client := &http.Client{Transport: p.transport, Timeout: timeout, CheckRedirect: sameHostRedirects}
	res, err := client.Do(req.WithContext(ctx))
	if err != nil {
		return Failure, err.Error()
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxOutput))
	if err != nil {
		return Failure, fmt.Sprintf("reading the response: %v", err)
	}
	body := string(b)
	switch {
	case res.StatusCode >= 200 && res.StatusCode < 300:
		return Success, body
	case res.StatusCode >= 300 && res.StatusCode < 400:
		return Warning, "Probe terminated redirects, Response body: " + body
	default:
		return Failure, fmt.Sprintf("HTTP probe failed with statuscode: %d", res.StatusCode)
	}
}

func sameHostRedirects(req *http.Request, via []*http.Request) error {
	if req.URL.Hostname() != via[0].URL.Hostname() {
		return http.ErrUseLastResponse
	}
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}
