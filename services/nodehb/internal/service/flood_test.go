package service

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/splitlet/splitlet/services/nodehb/internal/lease"
)

// Figures of the flood: 200 requests a second, each with a new bogus
// bearer token, for 25 s (at most 5000 requests), spread over 40 loopback
// source addresses, so that the per-source limit alone cannot hold it: 40
// sources at 1 failure a second after a burst of 10 still ask more reviews
// than the kubelet's 50 QPS client makes.
const (
	floodRate    = 200
	floodFor     = 25 * time.Second
	floodSources = 40
	floodTimeout = 3 * time.Second
	floodRenew   = time.Second
	// floodSlack is how late beyond its period a renewal or a status
	// write may land on a busy two-core machine.
	floodSlack = 2 * time.Second
)

// TestHeartbeatSurvivesTokenFlood: while the kubelet API is flooded with
// requests carrying new bogus tokens, the Lease is renewed every period
// and the Node status written and Ready, because the heartbeat has an API
// client of its own; the kubelet API keeps serving kube-apiserver's
// client certificate; the flood met both the reviews (401) and the
// per-source limit (429).
func TestHeartbeatSurvivesTokenFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("floods the control plane for 25 s")
	}
	// The process's shared client at the kubelet's figures (kube-api-qps 50
	// and kube-api-burst 100, the defaults on real runtimes).
	restCfg := rest.CopyConfig(cp.Config)
	restCfg.QPS, restCfg.Burst = 50, 100
	s := startStackWith(t, "flood-node", restCfg,
		"--nodehb.lease-renew-interval="+floodRenew.String(),
		"--nodehb.node-status-update-frequency=1s",
		"--nodehb.node-status-report-frequency=1s",
		"--nodehb.agent-ready-timeout=10s")
	s.heartbeat(t, true, 500*time.Millisecond)
	s.waitReady(t, corev1.ConditionTrue, "KubeletReady")
	eventually(t, 15*time.Second, "lease created", func() error {
		_, err := s.cs.CoordinationV1().Leases(lease.Namespace).Get(t.Context(), s.node, metav1.GetOptions{})
		return err
	})
	base := fmt.Sprintf("https://127.0.0.1:%d", s.port)
	cert, err := tls.LoadX509KeyPair(filepath.Join(cp.Dir, "kubelet-client.crt"), filepath.Join(cp.Dir, "kubelet-client.key"))
	if err != nil {
		t.Fatal(err)
	}
	apiserver := apiClient(t, &cert)
	if code, body := get(t, apiserver, base+"/pods", ""); code != http.StatusOK {
		t.Fatalf("kube-apiserver's /pods before the flood: %d %s", code, body)
	}

	ctx, cancel := context.WithTimeout(t.Context(), floodFor)
	defer cancel()
	var wg sync.WaitGroup
	var hb heartbeatWatch
	var probe podsProbe
	wg.Add(2)
	go func() { defer wg.Done(); hb.watch(ctx, s.cs, s.node) }()
	go func() { defer wg.Done(); probe.run(ctx, apiserver, base+"/pods") }()
	res := flood(ctx, t, base+"/pods")
	wg.Wait()

	t.Logf("flood: %d sent, %d dropped (too many open), answers %v, %d transport errors", res.sent, res.dropped, res.codes, res.errs)
	t.Logf("lease: %d renewals seen, gap between renewTimes at most %v, age at most %v", hb.renewals, hb.maxGap, hb.maxLeaseAge)
	t.Logf("node: status age at most %v, %d polls not Ready; kube-apiserver's /pods: %d probes, slowest %v, failures %v",
		hb.maxStatusAge, len(hb.notReady), probe.n, probe.slowest, probe.failures)
	if res.sent < floodRate*int(floodFor/time.Second)*8/10 {
		t.Errorf("the flood sent %d requests, want about %d", res.sent, floodRate*int(floodFor/time.Second))
	}
	if res.codes[http.StatusUnauthorized] == 0 || res.codes[http.StatusTooManyRequests] == 0 {
		t.Errorf("answers %v: want both 401 (reviewed) and 429 (limited)", res.codes)
	}
	if limit := floodRenew + floodSlack; hb.maxGap > limit || hb.maxLeaseAge > limit {
		t.Errorf("the Lease was not renewed every %v within %v: gap %v, age %v", floodRenew, floodSlack, hb.maxGap, hb.maxLeaseAge)
	}
	if want := int(floodFor/floodRenew) / 2; hb.renewals < want {
		t.Errorf("%d renewals in %v, want at least %d", hb.renewals, floodFor, want)
	}
	if limit := 2*time.Second + floodSlack; hb.maxStatusAge > limit {
		t.Errorf("the Node status was last written %v before a poll, want within %v", hb.maxStatusAge, limit)
	}
	if len(hb.notReady) > 0 {
		t.Errorf("the Node was not Ready during the flood: %v", hb.notReady)
	}
	if len(probe.failures) > 0 {
		t.Errorf("kube-apiserver's /pods failed during the flood: %v", probe.failures)
	}
}

// heartbeatWatch polls the Lease and the Node with the test's own client.
type heartbeatWatch struct {
	renewals                 int
	maxGap, maxLeaseAge      time.Duration
	maxStatusAge             time.Duration
	notReady                 []string
	lastRenew, lastHeartbeat time.Time
}

func (w *heartbeatWatch) watch(ctx context.Context, cs kubernetes.Interface, node string) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		l, lerr := cs.CoordinationV1().Leases(lease.Namespace).Get(pctx, node, metav1.GetOptions{})
		n, nerr := cs.CoreV1().Nodes().Get(pctx, node, metav1.GetOptions{})
		cancel()
		if ctx.Err() != nil {
			return
		}
		now := time.Now()
		if lerr == nil && l.Spec.RenewTime != nil {
			w.lease(now, l.Spec.RenewTime.Time)
		}
		if nerr == nil {
			w.node(now, n)
		}
	}
}

func (w *heartbeatWatch) lease(now, renew time.Time) {
	if !w.lastRenew.IsZero() && renew.After(w.lastRenew) {
		w.renewals++
		w.maxGap = max(w.maxGap, renew.Sub(w.lastRenew))
	}
	if renew.After(w.lastRenew) {
		w.lastRenew = renew
	}
	w.maxLeaseAge = max(w.maxLeaseAge, now.Sub(w.lastRenew))
}

func (w *heartbeatWatch) node(now time.Time, n *corev1.Node) {
	c := readyCondition(n)
	if c == nil || c.Status != corev1.ConditionTrue {
		w.notReady = append(w.notReady, fmt.Sprintf("%s: %+v", now.Format(time.StampMilli), c))
		return
	}
	if hb := c.LastHeartbeatTime.Time; hb.After(w.lastHeartbeat) {
		w.lastHeartbeat = hb
	}
	// Heartbeat times are whole seconds.
	w.maxStatusAge = max(w.maxStatusAge, now.Sub(w.lastHeartbeat)-time.Second)
}

// podsProbe asks for /pods as kube-apiserver does (client certificate)
// every second.
type podsProbe struct {
	n        int
	slowest  time.Duration
	failures []string
}

func (p *podsProbe) run(ctx context.Context, c *http.Client, url string) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		start := time.Now()
		code, err := getStatus(ctx, c, url, "", 5*time.Second)
		if ctx.Err() != nil {
			return
		}
		p.n++
		p.slowest = max(p.slowest, time.Since(start))
		if err != nil || code != http.StatusOK {
			p.failures = append(p.failures, fmt.Sprintf("%d %v", code, err))
		}
	}
}

type floodResult struct {
	sent, dropped, errs int
	codes               map[int]int
}

// flood sends floodRate requests a second with new random bearer tokens
// until ctx ends, round robin from floodSources loopback addresses
// (127.0.0.10 on); at most floodRate*floodTimeout are open at once.
func flood(ctx context.Context, t *testing.T, url string) floodResult {
	t.Helper()
	clients := make([]*http.Client, floodSources)
	for i := range clients {
		src := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(10+i))}
		d := &net.Dialer{LocalAddr: src, Timeout: floodTimeout}
		clients[i] = &http.Client{Timeout: floodTimeout, Transport: &http.Transport{
			DialContext:         d.DialContext,
			TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the serving certificate is self-signed
			MaxIdleConnsPerHost: floodRate,
		}}
		defer clients[i].CloseIdleConnections()
	}
	res := floodResult{codes: map[int]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	open := make(chan struct{}, floodRate*int(floodTimeout/time.Second))
	tick := time.NewTicker(time.Second / floodRate)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return res
		case <-tick.C:
		}
		select {
		case open <- struct{}{}:
		default:
			res.dropped++
			continue
		}
		res.sent++
		wg.Add(1)
		go func(c *http.Client) {
			defer wg.Done()
			defer func() { <-open }()
			code, err := getStatus(ctx, c, url, randomToken(t), floodTimeout)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.errs++
				return
			}
			res.codes[code]++
		}(clients[i%floodSources])
	}
}

func randomToken(t *testing.T) string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Error(err)
	}
	return hex.EncodeToString(b)
}

// getStatus GETs url (with a bearer token unless empty) and returns the
// status code, reading the body so that the connection is reused.
func getStatus(ctx context.Context, c *http.Client, url, token string, timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}
