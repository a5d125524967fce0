package testenv

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"
)

// Identities of the control plane components, as a real cluster names them
// (the API server's bootstrap RBAC grants each what it needs).
const (
	ControllerManagerUser = "system:kube-controller-manager"
	SchedulerUser         = "system:kube-scheduler"
)

// StartControllers runs kube-controller-manager and kube-scheduler (from
// bin/: `TESTENV_EXTRA="kube-scheduler kube-controller-manager"
// hack/testenv/build.sh bin`) against the API server, each with a client
// certificate of its own identity, and waits until both answer /healthz.
// kube-controller-manager runs every default controller with a service
// account per controller (--use-service-account-credentials), signs
// legacy service account tokens with the API server's key, publishes the
// CA as kube-root-ca.crt in every namespace and signs CSRs with the CA.
// Their logs are Dir/kube-controller-manager.log and
// Dir/kube-scheduler.log; Stop stops them.
func (cp *ControlPlane) StartControllers(ctx context.Context) (err error) {
	return cp.startControllers(ctx, true, nil)
}

// CSRControllers are the controllers of kube-controller-manager a node's
// TLS bootstrap needs: approval of node client CSRs (csrapproving), their
// signing with the CA (csrsigning), clean-up of old CSRs (csrcleaner) and
// of expired bootstrap tokens (tokencleaner).
var CSRControllers = []string{"csrapproving", "csrsigning", "csrcleaner", "tokencleaner"}

// ServiceControllers are the controllers of kube-controller-manager that
// give Services their endpoints: EndpointSlices from the ready pods a
// Service selects (endpointslice), and from the Endpoints of a Service
// without a selector (endpointslicemirroring).
var ServiceControllers = []string{"endpointslice", "endpointslicemirroring"}

// StartCSRControllers runs kube-controller-manager alone with the
// CSRControllers (no scheduler), as StartControllers runs it otherwise.
func (cp *ControlPlane) StartCSRControllers(ctx context.Context) error {
	return cp.startControllers(ctx, false, CSRControllers)
}

// startControllers runs kube-controller-manager (with the controllers
// named, all defaults when none) and, when scheduler, kube-scheduler.
func (cp *ControlPlane) startControllers(ctx context.Context, scheduler bool, controllers []string) (err error) {
	if cp.pki == nil || cp.pki.caKey == nil {
		return errNoCA
	}
	kcmBin, err := Binary("kube-controller-manager")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			cp.stopControllers()
		}
	}()
	users := []string{ControllerManagerUser}
	if scheduler {
		users = append(users, SchedulerUser)
	}
	kubeconfigs, err := cp.writeUserKubeconfigs(users)
	if err != nil {
		return err
	}
	kcm, err := cp.startControllerManager(kcmBin, kubeconfigs[ControllerManagerUser], controllers)
	if err != nil {
		return err
	}
	waits := []healthCheck{kcm}
	if scheduler {
		sched, err := cp.startScheduler(kubeconfigs[SchedulerUser])
		if err != nil {
			return err
		}
		waits = append(waits, sched)
	}
	return waitHealthy(ctx, waits)
}

// healthCheck is a started component and the port of its /healthz.
type healthCheck struct {
	p    *process
	port int
}

// writeUserKubeconfigs writes a kubeconfig with a client certificate for
// each user into Dir and returns their paths by user.
func (cp *ControlPlane) writeUserKubeconfigs(users []string) (map[string]string, error) {
	kubeconfigs := map[string]string{}
	for _, user := range users {
		cfg, err := cp.ClientConfig(user)
		if err != nil {
			return nil, err
		}
		path := filepath.Join(cp.Dir, strings.TrimPrefix(user, "system:")+".kubeconfig")
		if err := WriteKubeconfigFor(path, user, cfg); err != nil {
			return nil, err
		}
		kubeconfigs[user] = path
	}
	return kubeconfigs, nil
}

// startControllerManager runs kube-controller-manager on a free port with
// the control plane's CA and service account key (controllers: all
// defaults when none).
func (cp *ControlPlane) startControllerManager(bin, kubeconfig string, controllers []string) (healthCheck, error) {
	port, err := FreePort()
	if err != nil {
		return healthCheck{}, err
	}
	args := append(servingArgs(cp.Dir, "kube-controller-manager", kubeconfig, port),
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+cp.pki.saKey,
		"--root-ca-file="+cp.pki.caFile,
		"--cluster-signing-cert-file="+cp.pki.caFile,
		"--cluster-signing-key-file="+cp.pki.caKeyFile,
		"--service-cluster-ip-range="+ServiceCIDR,
	)
	if len(controllers) > 0 {
		args = append(args, "--controllers="+strings.Join(controllers, ","))
	}
	if cp.signingDuration > 0 {
		args = append(args, "--cluster-signing-duration="+cp.signingDuration.String())
	}
	if cp.controllerManager, err = startProcess("kube-controller-manager", filepath.Join(cp.Dir, "kube-controller-manager.log"), bin, args...); err != nil {
		return healthCheck{}, err
	}
	return healthCheck{cp.controllerManager, port}, nil
}

// startScheduler runs kube-scheduler on a free port.
func (cp *ControlPlane) startScheduler(kubeconfig string) (healthCheck, error) {
	bin, err := Binary("kube-scheduler")
	if err != nil {
		return healthCheck{}, err
	}
	port, err := FreePort()
	if err != nil {
		return healthCheck{}, err
	}
	if cp.scheduler, err = startProcess("kube-scheduler", filepath.Join(cp.Dir, "kube-scheduler.log"), bin,
		servingArgs(cp.Dir, "kube-scheduler", kubeconfig, port)...); err != nil {
		return healthCheck{}, err
	}
	return healthCheck{cp.scheduler, port}, nil
}

// waitHealthy waits up to two minutes until each component answers
// /healthz. Their serving certificates are self-signed (--cert-dir): only
// liveness is checked here, not who serves.
func waitHealthy(ctx context.Context, checks []healthCheck) error {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, c := range checks {
		url := fmt.Sprintf("https://127.0.0.1:%d/healthz", c.port)
		if err := c.p.waitFor(waitCtx, "/healthz", func() error { return httpOK(client, url, "") }); err != nil {
			return err
		}
	}
	return nil
}

// servingArgs: both controllers authenticate and authorize their own HTTPS
// requests through the API server (TokenReview, SubjectAccessReview),
// which their roles allow; /healthz is always allowed.
func servingArgs(dir, name, kubeconfig string, port int) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + itoa(port),
		"--cert-dir=" + filepath.Join(dir, name+"-certs"),
		"--leader-elect=false",
		"--v=0",
	}
}

// stopControllers stops kube-scheduler and kube-controller-manager, when
// they run.
func (cp *ControlPlane) stopControllers() {
	for _, p := range []*process{cp.scheduler, cp.controllerManager} {
		if p != nil {
			p.stop(10 * time.Second)
		}
	}
}
