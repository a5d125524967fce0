package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/splitlet/splitlet/libs/kube"
)

// runIdealAgent is the ceiling: the least a node agent can do. An informer
// on the node's pods; one status patch per new pod straight to Running and
// Ready; a grace-0 delete for a pod being deleted. No runtime, no bus.
func runIdealAgent(node, kubeconfig string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg, err := kube.RESTConfig(kubeconfig, 5000, 10000, "ideal-agent", runtime.ContentTypeProtobuf)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	factory := kube.NodePodsFactory(cs, node, 0)
	informer := factory.Core().V1().Pods().Informer()
	lister := factory.Core().V1().Pods().Lister()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName]())
	enqueue := func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok {
			queue.Add(cache.MetaObjectToName(pod))
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	if err := markNodeReady(ctx, cs, node); err != nil {
		return err
	}
	handle := func(name cache.ObjectName) error {
		pod, err := lister.Pods(name.Namespace).Get(name.Name)
		if err != nil {
			return nil // gone
		}
		if pod.DeletionTimestamp != nil {
			zero := int64(0)
			uid := pod.UID
			err := cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
				GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
			return ignoreGone(err)
		}
		if pod.Status.Phase == corev1.PodRunning {
			return nil
		}
		patch, err := runningPatch(pod)
		if err != nil {
			return err
		}
		_, err = cs.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		return ignoreGone(err)
	}
	for range 32 {
		go func() {
			for {
				name, shutdown := queue.Get()
				if shutdown {
					return
				}
				if err := handle(name); err != nil {
					queue.AddRateLimited(name)
				} else {
					queue.Forget(name)
				}
				queue.Done(name)
			}
		}()
	}
	<-ctx.Done()
	queue.ShutDown()
	return nil
}

// markNodeReady says, through the node's Ready condition, that the agent
// has synced and takes pods: the bench waits for it before creating them,
// as it does for every agent.
func markNodeReady(ctx context.Context, cs kubernetes.Interface, node string) error {
	now := metav1.Now()
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "IdealAgentSynced",
		LastHeartbeatTime: now, LastTransitionTime: now,
	}}}})
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

func ignoreGone(err error) error {
	if err == nil {
		return nil
	}
	if se, ok := err.(interface{ Status() metav1.Status }); ok {
		switch se.Status().Reason {
		case metav1.StatusReasonNotFound, metav1.StatusReasonConflict:
			return nil
		}
	}
	return err
}

// runningPatch is the whole status of a running, ready pod in one patch.
func runningPatch(pod *corev1.Pod) ([]byte, error) {
	now := metav1.NewTime(time.Now())
	cond := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now}
	}
	status := corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    "127.0.0.1",
		PodIP:     "127.0.0.1",
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			cond(corev1.PodReadyToStartContainers), cond(corev1.PodInitialized),
			cond(corev1.ContainersReady), cond(corev1.PodReady),
		},
	}
	for _, c := range pod.Spec.Containers {
		started := true
		status.ContainerStatuses = append(status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: &started,
			ContainerID: fmt.Sprintf("ideal://%s/%s", pod.UID, c.Name),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	return json.Marshal(map[string]any{"status": status})
}
