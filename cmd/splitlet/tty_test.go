package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/testenv"
)

// oneSize is a terminal that is resized once, then keeps its size until
// the exec ends.
type oneSize struct {
	size remotecommand.TerminalSize
	once sync.Once
	done <-chan struct{}
}

func (q *oneSize) Next() *remotecommand.TerminalSize {
	sent := false
	q.once.Do(func() { sent = true })
	if sent {
		return &q.size
	}
	<-q.done
	return nil
}

// execTTY runs `kubectl exec -it` through the API server: cmd with a
// terminal of the given size, input typed as stdin. It returns what the
// terminal showed and the executor's error (an exit status for a command
// that ended non-zero).
func execTTY(ctx context.Context, cp *testenv.ControlPlane, namespace, pod, container string, cmd []string, input string, size remotecommand.TerminalSize) (string, error) {
	req := cp.Clientset().CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdin: true, Stdout: true, TTY: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(cp.Config, "POST", req.URL())
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// stdin stays open until the command has ended, as a terminal's does.
	in, typist := io.Pipe()
	defer typist.Close()
	go func() { _, _ = io.WriteString(typist, input) }()
	var out apptest.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{
		Stdin: in, Stdout: &out, Tty: true,
		TerminalSizeQueue: &oneSize{size: size, done: ctx.Done()},
	})
	return out.String(), err
}

// attachTTY runs `kubectl attach -it` through the API server, types input
// and returns what the terminal showed once it shows want (or the deadline
// passes), with the executor's error when it ended before.
func attachTTY(ctx context.Context, cp *testenv.ControlPlane, namespace, pod, container, input, want string) (string, error) {
	req := cp.Clientset().CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("attach").
		VersionedParams(&corev1.PodAttachOptions{Container: container, Stdin: true, Stdout: true, TTY: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(cp.Config, "POST", req.URL())
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	in, typist := io.Pipe()
	defer typist.Close()
	go func() { _, _ = io.WriteString(typist, input) }()
	out := &watchBuffer{want: want, seen: cancel}
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: in, Stdout: out, Tty: true})
	if out.found() {
		return out.String(), nil
	}
	return out.String(), err
}

// watchBuffer calls seen once what it holds contains want.
type watchBuffer struct {
	apptest.Buffer
	want string
	seen func()
	mu   sync.Mutex
	hit  bool
}

func (b *watchBuffer) Write(p []byte) (int, error) {
	n, err := b.Buffer.Write(p)
	if strings.Contains(b.String(), b.want) {
		b.mu.Lock()
		b.hit = true
		b.mu.Unlock()
		b.seen()
	}
	return n, err
}

func (b *watchBuffer) found() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hit
}

// TestEndToEndCRIExecWithTTY: with every stage in one process on the CRI
// runtime (containerd), `kubectl exec -it` goes API server → nodehb →
// containerd's stream server: what is typed reaches busybox's shell as it
// is typed, its terminal has the size the client set, its output comes
// back, and its exit code is the exec's. `kubectl attach -it` reaches the
// shell a container with stdin and tty runs.
func TestEndToEndCRIExecWithTTY(t *testing.T) {
	testenv.SkipShort(t, "containerd, etcd and kube-apiserver")
	ctx := t.Context()
	cd := hostContainerd(t)
	cp := testenv.ControlPlaneForTest(t)
	const node = "e2e-cri-tty"
	startAgent(t, cp, node, "--runtime=cri", "--cri-endpoint="+cd.Endpoint)
	cs := cp.Clientset()

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "shell", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name: "main", Image: testenv.BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sh", "-c", "while true; do sleep 0.2; done"},
			}, {
				Name: "console", Image: testenv.BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sh"}, Stdin: true, TTY: true,
			}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Registered after startAgent, so it runs while the agent still does:
	// the agent stops and removes the container.
	// The test's context has ended when clean-ups run: this one polls on its own.
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = cs.CoreV1().Pods("default").Delete(cctx, "shell", metav1.DeleteOptions{})
		err := wait.PollUntilContextCancel(cctx, testenv.PollInterval, true, func(ctx context.Context) (bool, error) {
			_, err := cs.CoreV1().Pods("default").Get(ctx, "shell", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Errorf("the pod not gone within 1m: %v", err)
		}
	})
	testenv.Eventually(t, 2*time.Minute, "the pod Running", func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "shell", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		running := 0
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Running != nil {
				running++
			}
		}
		return p.Status.Phase == corev1.PodRunning && running == 2, fmt.Sprintf("%s, %d running", p.Status.Phase, running)
	})

	// The resize travels on its own stream: the shell waits (up to 10 s)
	// for it to land before it prints the size.
	input := `i=0; until [ "$(stty size)" = "37 91" ] || [ $i -ge 100 ]; do sleep 0.1; i=$((i+1)); done; stty size; echo hi; exit 3` + "\n"
	out, err := execTTY(ctx, cp, "default", "shell", "main", []string{"sh"}, input, remotecommand.TerminalSize{Width: 91, Height: 37})
	var exit interface{ ExitStatus() int }
	if !errors.As(err, &exit) || exit.ExitStatus() != 3 {
		t.Errorf("exec -it: %v, want exit status 3; terminal:\n%q", err, out)
	}
	// A terminal writes \r\n; the typed line is echoed, so the output is
	// told apart by its own lines.
	if !strings.Contains(out, "\n37 91\r\n") {
		t.Errorf("stty size did not show 37 rows, 91 columns; terminal:\n%q", out)
	}
	if !strings.Contains(out, "\nhi\r\n") {
		t.Errorf("no hi on the terminal:\n%q", out)
	}

	// Without a terminal, the same proxied path streams stdin to the end.
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name("shell").SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "main", Command: []string{"sh", "-c", "cat; echo err >&2; exit 4"}, Stdin: true, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(cp.Config, "POST", req.URL())
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr apptest.Buffer
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = ex.StreamWithContext(sctx, remotecommand.StreamOptions{Stdin: strings.NewReader("from stdin\n"), Stdout: &stdout, Stderr: &stderr})
	if !errors.As(err, &exit) || exit.ExitStatus() != 4 || stdout.String() != "from stdin\n" || stderr.String() != "err\n" {
		t.Errorf("exec without a terminal: %v, stdout %q, stderr %q; want exit 4, the input back, err", err, stdout.String(), stderr.String())
	}

	// kubectl attach -it: the console's shell reads what is typed. The
	// product is told apart from the echoed line by its own line.
	if out, err := attachTTY(ctx, cp, "default", "shell", "console", "echo $((6*7))\n", "\n42\r\n"); !strings.Contains(out, "\n42\r\n") {
		t.Errorf("attach -it: %v; terminal:\n%q", err, out)
	}
}
