// Package source holds podconfig's pod sources: the API server (an informer
// on the node's pods), a directory of static pod manifests, and a manifest
// URL. Each reports into a Sink; none publishes anything itself.
package source

import (
	"context"
	"maps"
	"sync"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/services/podconfig/internal/merge"
)

// Sink receives a source's reports (the controller).
type Sink interface {
	Submit(merge.Update)
}

// MirrorObserver hears of every change to a mirror pod in the API server.
type MirrorObserver interface {
	MirrorPodChanged(namespace, name string)
}

// IsMirrorPod: the pod is the API server's mirror of a static pod.
func IsMirrorPod(p *corev1.Pod) bool {
	_, ok := p.Annotations[merge.AnnotationMirror]
	return ok
}

// API is the API server source: the informer on the pods bound to the node
// (kube.NodePods, shared with the process's other stages that watch them).
// Informer events go to the sink as ADD, UPDATE and REMOVE of one pod (the
// storage classifies them); once the informer's initial list has been
// handed over, the source is marked seen. Mirror pods are not API pods: they
// go to the MirrorObserver only.
type API struct {
	node    string
	sink    Sink
	log     *zap.Logger
	mirrors MirrorObserver
	pods    *kube.NodePods

	mu      sync.Mutex
	inf     cache.SharedIndexInformer
	reg     cache.ResourceEventHandlerRegistration
	release func()
}

// NewAPI builds the source; Start runs it. podconfig hands whole pods on,
// so it wants them whole (but their managed fields).
func NewAPI(pods *kube.NodePods, node string, sink Sink, log *zap.Logger) *API {
	pods.Want(kube.FullPods)
	return &API{node: node, sink: sink, log: log, pods: pods}
}

// SetMirrorObserver sets who hears of mirror pods; call it before Start.
func (a *API) SetMirrorObserver(m MirrorObserver) { a.mirrors = m }

// Lister lists the node's pods from the informer's cache (mirror pods too);
// before Start it lists none.
func (a *API) Lister() corelisters.PodLister { return apiLister{a} }

// HasSynced reports whether the initial list has been handed to the sink.
func (a *API) HasSynced() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reg != nil && a.reg.HasSynced()
}

// Start takes the informer and hands its events to the sink until Stop, and
// marks the source seen once the initial list has been handed over. It does
// not block.
func (a *API) Start(ctx context.Context) {
	inf, release := a.pods.Acquire(kube.FullPods)
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.onAdd(obj) },
		UpdateFunc: func(old, cur any) { a.onUpdate(old, cur) },
		DeleteFunc: func(obj any) { a.onDelete(obj) },
	})
	if err != nil {
		// Only a stopped informer refuses a handler, and Acquire hands out
		// running ones.
		a.log.Error("the API source cannot follow the node's pods", zap.Error(err))
		release()
		return
	}
	a.mu.Lock()
	a.inf, a.reg, a.release = inf, reg, release
	a.mu.Unlock()
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
			// kubelet: the first complete view of a source marks it ready.
			a.sink.Submit(merge.Update{Source: merge.SourceAPI, Op: merge.OpSeen})
		}
	}()
}

// Stop lets go of the informer (after ctx of Start ended): the informer
// hands the sink no event it distributes after that (one being handed over
// as Stop runs may still arrive; Submit never blocks on a stopped loop).
func (a *API) Stop() {
	a.mu.Lock()
	release := a.release
	a.release = nil
	a.mu.Unlock()
	if release != nil {
		release()
	}
}

// apiLister reads the informer's cache the source holds at the time of the
// call (the mirror manager is built before the source starts).
type apiLister struct{ a *API }

func (l apiLister) current() corelisters.PodLister {
	l.a.mu.Lock()
	defer l.a.mu.Unlock()
	if l.a.inf == nil {
		return noPods
	}
	return corelisters.NewPodLister(l.a.inf.GetIndexer())
}

// noPods lists no pod: the API source before it starts.
var noPods = corelisters.NewPodLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}))

func (l apiLister) List(selector labels.Selector) ([]*corev1.Pod, error) {
	return l.current().List(selector)
}

func (l apiLister) Pods(namespace string) corelisters.PodNamespaceLister {
	return l.current().Pods(namespace)
}

func (a *API) submit(op bus.Op, p *corev1.Pod) {
	if p.Spec.NodeName != a.node {
		return // the field selector already keeps other nodes' pods away
	}
	// the storage sets annotations on what it is given and replaces other
	// fields whole, never changing them in place: a copy of the informer's
	// object with its own annotations is enough.
	cp := *p
	cp.Annotations = maps.Clone(p.Annotations)
	a.sink.Submit(merge.Update{Source: merge.SourceAPI, Op: op, Pods: []*corev1.Pod{&cp}})
}

func (a *API) mirror(p *corev1.Pod) {
	if a.mirrors != nil {
		a.mirrors.MirrorPodChanged(p.Namespace, p.Name)
	}
}

func (a *API) onAdd(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if IsMirrorPod(p) {
		a.mirror(p)
		return
	}
	a.submit(bus.OpAdd, p)
}

func (a *API) onUpdate(oldObj, curObj any) {
	old, ok1 := oldObj.(*corev1.Pod)
	cur, ok2 := curObj.(*corev1.Pod)
	if !ok1 || !ok2 {
		return
	}
	switch {
	case IsMirrorPod(cur):
		if !IsMirrorPod(old) {
			a.submit(bus.OpRemove, old)
		}
		a.mirror(cur)
	default:
		if IsMirrorPod(old) {
			a.mirror(old)
		}
		a.submit(bus.OpUpdate, cur)
	}
}

func (a *API) onDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		a.log.Warn("deleted object is not a pod", zap.Any("object", obj))
		return
	}
	if IsMirrorPod(p) {
		a.mirror(p)
		return
	}
	a.log.Debug("pod gone from the API server", logging.Pod(p.Namespace, p.Name, string(p.UID))...)
	a.submit(bus.OpRemove, p)
}
