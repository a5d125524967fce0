package testenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"path/filepath"
	"time"
)

// KillAPIServer ends kube-apiserver with SIGKILL (an outage of the API
// server: etcd and everything else go on).
func (cp *ControlPlane) KillAPIServer() {
	if cp.apiserver == nil || cp.apiserver.exited() {
		return
	}
	_ = cp.apiserver.cmd.Process.Kill()
	<-cp.apiserver.done
}

// RestartAPIServer starts kube-apiserver again with the command line it
// had (port, certificates, tokens, etcd: clients' kubeconfigs stay valid)
// and waits until it is ready.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context) error {
	if cp.apiserver == nil {
		return fmt.Errorf("testenv: no kube-apiserver was started")
	}
	if !cp.apiserver.exited() {
		return fmt.Errorf("testenv: kube-apiserver still runs")
	}
	old := cp.apiserver.cmd
	cp.restarts++
	p, err := startProcess("kube-apiserver", filepath.Join(cp.Dir, fmt.Sprintf("kube-apiserver.%d.log", cp.restarts)), old.Path, old.Args[1:]...)
	if err != nil {
		return err
	}
	cp.apiserver = p
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.CAData)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 5 * time.Second}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return p.waitFor(wctx, "/readyz", func() error { return httpOK(client, cp.URL+"/readyz", cp.Tokens[AdminUser]) })
}
