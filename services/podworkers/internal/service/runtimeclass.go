package service

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
)

// runtimeClasses starts an informer of the cluster's RuntimeClasses (the
// node may list and watch them) and returns the lookup of a class's
// runtime handler, with the kubelet's errors (LookupRuntimeHandler: a
// missing class is the API's NotFound, "runtimeclass.node.k8s.io "x" not
// found"), and the informer's stop. It waits up to 10 s for the first
// list: an API server that does not answer only delays the start, and a
// sandbox made meanwhile fails and is retried.
func runtimeClasses(ctx context.Context, cs kubernetes.Interface) (lookup func(name string) (string, error), stop func()) {
	factory := informers.NewSharedInformerFactory(cs, 0)
	lister := factory.Node().V1().RuntimeClasses().Lister()
	factory.Start(ctx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	factory.WaitForCacheSync(syncCtx.Done())
	cancel()
	lookup = func(name string) (string, error) {
		rc, err := lister.Get(name)
		switch {
		case apierrors.IsNotFound(err):
			return "", err
		case err != nil:
			return "", fmt.Errorf("failed to lookup RuntimeClass %s: %v", name, err)
		}
		return rc.Handler, nil
	}
	return lookup, factory.Shutdown
}
