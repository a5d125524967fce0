package kube

import (
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// PodView is what a stage keeps of each of the node's pods: a name, and the
// informer transform that makes it. Every view is a part of FullPods.
type PodView struct {
	Name      string
	Transform cache.TransformFunc
}

// FullPods is the whole pod but its managed fields: the view a stage that
// hands pods on (podconfig) needs, and the one a shared informer caches
// when its stages want different views.
var FullPods = PodView{Name: "full", Transform: StripManagedFields}

// covers says whether a cache of view a serves a stage that wants view b.
func (a PodView) covers(b PodView) bool { return a.Name == b.Name || a.Name == FullPods.Name }

// NodePods hands the stages of one process the informer on the node's pods.
// Stages that run in one process (all-in-one) share one watch and one cache
// instead of each decoding every change of every pod; a stage that runs
// alone gets an informer of its own view only, the same code either way.
//
// Each stage declares its view with Want when it is built (fx builds every
// stage before it starts any), and takes the informer with Acquire when it
// starts. The first Acquire builds and starts the informer with the view
// that covers every declared one (a single view when every stage wants the
// same, else FullPods); the last release stops it. A stage whose view the
// running informer does not cover (it declared none before the informer was
// built) gets an informer of its own, so a late stage is served, unshared.
type NodePods struct {
	cs   kubernetes.Interface
	node string

	mu     sync.Mutex
	wanted map[string]PodView
	cur    *sharedPods
}

// NewNodePods returns the node's pod informers for the stages of a process.
func NewNodePods(cs kubernetes.Interface, node string) *NodePods {
	return &NodePods{cs: cs, node: node, wanted: map[string]PodView{}}
}

// Want declares that a stage will read the node's pods through v.
func (n *NodePods) Want(v PodView) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.wanted[v.Name] = v
}

// Acquire returns the informer on the node's pods, started, whose cache
// holds at least v of each pod (it may hold more: a stage reads only its
// view's fields and never writes to a cached object). release removes the
// event handlers added through the returned informer and stops the
// informer once no stage holds it; call it once the stage is done with it.
// The informer's HasSynced is the cache's: a stage that needs its handlers
// to have seen the initial list waits on its handler registration's.
func (n *NodePods) Acquire(v PodView) (inf cache.SharedIndexInformer, release func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cur != nil {
		if n.cur.view.covers(v) {
			n.cur.users++
			return n.cur.handle(n)
		}
		// The running informer caches a narrower view: this stage gets its own.
		return n.start(v).handle(nil)
	}
	view := v
	for name := range n.wanted {
		if name != v.Name {
			view = FullPods
			break
		}
	}
	n.cur = n.start(view)
	return n.cur.handle(n)
}

func (n *NodePods) start(view PodView) *sharedPods {
	f := NodePodsFactoryWith(n.cs, n.node, 0, view.Transform)
	s := &sharedPods{view: view, inf: f.Core().V1().Pods().Informer(), stop: make(chan struct{}), shutdown: f.Shutdown, users: 1}
	f.Start(s.stop)
	return s
}

// sharedPods is one running informer and the number of stages holding it.
type sharedPods struct {
	view     PodView
	inf      cache.SharedIndexInformer
	stop     chan struct{}
	shutdown func()
	users    int
}

// handle wraps the informer for one stage; owner (nil for an unshared
// informer) is the NodePods that counts its users.
func (s *sharedPods) handle(owner *NodePods) (cache.SharedIndexInformer, func()) {
	h := &podsHandle{SharedIndexInformer: s.inf}
	var once sync.Once
	return h, func() {
		once.Do(func() {
			h.removeHandlers()
			if owner != nil {
				owner.mu.Lock()
				s.users--
				last := s.users == 0
				if last && owner.cur == s {
					owner.cur = nil
				}
				owner.mu.Unlock()
				if !last {
					return
				}
			}
			close(s.stop)
			s.shutdown()
		})
	}
}

// podsHandle is one stage's hold on a shared informer: it remembers the
// stage's event handlers so that release removes them.
type podsHandle struct {
	cache.SharedIndexInformer
	mu   sync.Mutex
	regs []cache.ResourceEventHandlerRegistration
}

func (h *podsHandle) keep(reg cache.ResourceEventHandlerRegistration, err error) (cache.ResourceEventHandlerRegistration, error) {
	if err == nil {
		h.mu.Lock()
		h.regs = append(h.regs, reg)
		h.mu.Unlock()
	}
	return reg, err
}

func (h *podsHandle) AddEventHandler(handler cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return h.keep(h.SharedIndexInformer.AddEventHandler(handler))
}

func (h *podsHandle) AddEventHandlerWithResyncPeriod(handler cache.ResourceEventHandler, resync time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return h.keep(h.SharedIndexInformer.AddEventHandlerWithResyncPeriod(handler, resync))
}

func (h *podsHandle) AddEventHandlerWithOptions(handler cache.ResourceEventHandler, opts cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	return h.keep(h.SharedIndexInformer.AddEventHandlerWithOptions(handler, opts))
}

func (h *podsHandle) removeHandlers() {
	h.mu.Lock()
	regs := h.regs
	h.regs = nil
	h.mu.Unlock()
	for _, reg := range regs {
		_ = h.SharedIndexInformer.RemoveEventHandler(reg)
	}
}

// AddMissingIndexers adds those of idx the informer does not have yet: a
// stage that takes a shared informer again after a restart finds the
// indexers it added the first time (the same functions under its names).
func AddMissingIndexers(inf cache.SharedIndexInformer, idx cache.Indexers) error {
	have := inf.GetIndexer().GetIndexers()
	missing := cache.Indexers{}
	for name, f := range idx {
		if _, ok := have[name]; !ok {
			missing[name] = f
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return inf.AddIndexers(missing)
}
