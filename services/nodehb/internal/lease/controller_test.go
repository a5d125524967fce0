package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/splitlet/splitlet/libs/testenv"
)

// proxy forwards TCP to the API server and can be taken down: while down it
// drops every connection, as an unreachable API server would.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.setDown(true)
		p.wg.Wait()
	})
	return p
}

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); _, _ = io.Copy(up, c); _ = up.Close() }()
		go func() { defer p.wg.Done(); _, _ = io.Copy(c, up); _ = c.Close() }()
	}
}

func (p *proxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			_ = c.Close()
		}
		p.conns = map[net.Conn]bool{}
	}
}

// TestRenewalsSurviveAnOutage: while the API server is unreachable the
// controller keeps retrying; when it is back, renewals resume.
func TestRenewalsSurviveAnOutage(t *testing.T) {
	cp := testenv.ControlPlaneForTest(t)
	admin := cp.Clientset()
	node, err := admin.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "outage-node"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(cp.URL)
	if err != nil {
		t.Fatal(err)
	}
	px := newProxy(t, u.Host)
	cfg := rest.CopyConfig(cp.Config)
	cfg.Host = "https://" + px.ln.Addr().String()
	cfg.Timeout = 2 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	c := New(cs, node.Name, func() types.UID { return node.UID }, WithRenewInterval(100*time.Millisecond), WithLogger(zap.New(core)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	renewTime := func() (time.Time, error) {
		l, err := admin.CoordinationV1().Leases(Namespace).Get(t.Context(), node.Name, metav1.GetOptions{})
		if err != nil {
			return time.Time{}, err
		}
		if l.Spec.RenewTime == nil {
			return time.Time{}, errors.New("no renewTime")
		}
		if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != node.UID {
			return time.Time{}, fmt.Errorf("owner references %v", l.OwnerReferences)
		}
		return l.Spec.RenewTime.Time, nil
	}
	poll := func(what string, f func() error) {
		t.Helper()
		testenv.EventuallyNoError(t, 20*time.Second, what, f)
	}
	poll("first renewal", func() error { _, err := renewTime(); return err })

	px.setDown(true)
	poll("failures retried", func() error {
		if n := logs.FilterMessage("lease renewal failed, retrying").Len(); n < 3 {
			return fmt.Errorf("%d failed renewals so far", n)
		}
		return nil
	})
	outageEnd := time.Now()
	px.setDown(false)
	poll("renewals resume", func() error {
		rt, err := renewTime()
		if err != nil {
			return err
		}
		if !rt.After(outageEnd) {
			return fmt.Errorf("renewTime %v not after the outage (%v)", rt, outageEnd)
		}
		return nil
	})
	if logs.FilterMessage("lease renewal recovered").Len() == 0 {
		t.Error("recovery not logged")
	}
}

func TestBackoffSteps(t *testing.T) {
	d := BackoffStart
	var got []time.Duration
	for range 8 {
		got = append(got, d)
		d = nextBackoff(d)
	}
	want := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond,
		3200 * time.Millisecond, 6400 * time.Millisecond, 7 * time.Second, 7 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("backoff %v, want %v", got, want)
	}
}
