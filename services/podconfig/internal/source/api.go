// Package source holds podconfig's pod sources: the API server (an informer
// on the node's pods), a directory of static pod manifests, and a manifest
// URL. Each reports into a Sink; none publishes anything itself.
package source

import (
	"context"
	"maps"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
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

// API is the API server source: a shared informer on the pods bound to the
// node. Informer events go to the sink as ADD, UPDATE and REMOVE of one pod
// (the storage classifies them); once the informer's initial list has been
// handed over, the source is marked seen. Mirror pods are not API pods: they
// go to the MirrorObserver only.
type API struct {
	node    string
	sink    Sink
	log     *zap.Logger
	mirrors MirrorObserver
	pods    cache.SharedIndexInformer
	reg     cache.ResourceEventHandlerRegistration
	start   func(stop <-chan struct{})
	stop    func()
	lister  corelisters.PodLister
}

// NewAPI builds the source; Start runs it.
func NewAPI(cs kubernetes.Interface, node string, sink Sink, log *zap.Logger) (*API, error) {
	factory := kube.NodePodsFactory(cs, node, 0)
	inf := factory.Core().V1().Pods()
	a := &API{node: node, sink: sink, log: log, pods: inf.Informer(), lister: inf.Lister(), stop: factory.Shutdown}
	reg, err := a.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.onAdd(obj) },
		UpdateFunc: func(old, cur any) { a.onUpdate(old, cur) },
		DeleteFunc: func(obj any) { a.onDelete(obj) },
	})
	if err != nil {
		return nil, err
	}
	a.reg = reg
	a.start = factory.Start
	return a, nil
}

// SetMirrorObserver sets who hears of mirror pods; call it before Start.
func (a *API) SetMirrorObserver(m MirrorObserver) { a.mirrors = m }

// Lister lists the node's pods from the informer's cache (mirror pods too).
func (a *API) Lister() corelisters.PodLister { return a.lister }

// HasSynced reports whether the initial list has been handed to the sink.
func (a *API) HasSynced() bool { return a.reg.HasSynced() }

// Start runs the informer until ctx ends, and marks the source seen once
// the initial list has been handed over. It does not block.
func (a *API) Start(ctx context.Context) {
	a.start(ctx.Done())
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), a.reg.HasSynced) {
			// kubelet: the first complete view of a source marks it ready.
			a.sink.Submit(merge.Update{Source: merge.SourceAPI, Op: merge.OpSeen})
		}
	}()
}

// Stop waits for the informer's goroutines (after ctx of Start ended).
func (a *API) Stop() { a.stop() }

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
