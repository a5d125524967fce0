package testenv

import (
	"fmt"
	"path/filepath"
)

// OpenControlPlane is the control plane a StartControlPlane with
// KeepCredentials left in dir, serving at url, as another process sees it:
// its CA (to sign client identities: WriteClientKubeconfig) and its admin
// token (Config, Clientset). It starts and stops nothing; Stop does nothing
// but the files stay. The compose stack's cluster network uses it.
func OpenControlPlane(dir, url string) (*ControlPlane, error) {
	p := pkiFiles(dir)
	if err := p.loadCA(p.caFile, p.caKeyFile); err != nil {
		return nil, fmt.Errorf("testenv: the control plane's CA in %s: %w", dir, err)
	}
	tokens := readTokens(filepath.Join(dir, "tokens.csv"))
	if tokens[AdminUser] == "" {
		return nil, fmt.Errorf("testenv: no admin token in %s", filepath.Join(dir, "tokens.csv"))
	}
	cp := &ControlPlane{URL: url, Dir: dir, Tokens: tokens, pki: p, CAData: p.caPEM, CAFile: p.caFile}
	cp.Config = cp.ConfigFor(AdminUser)
	return cp, nil
}
