package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/recording"
	"github.com/splitlet/splitlet/libs/testenv"
)

// TestComposeStackShadowJSProber: the stack with examples/jsprober as a
// shadow of the Go prober (compose.shadow-jsprober.yaml, what `make up
// STACKFLAGS="--shadow=prober:jsprober"` runs). Plain pods, one with
// tcpSocket readiness and liveness probes and one with tcpSocket startup,
// httpGet and exec readiness probes, become Ready; the shadow publishes
// its results of each of their probes under shadow.prober; and the live
// diff (`splitlet bus diff --live prober`: recording.Live) compares the
// two sides and finds no difference.
func TestComposeStackShadowJSProber(t *testing.T) {
	if err := exec.Command("docker", "image", "inspect", image("jsprober")).Run(); err != nil {
		t.Fatalf("image %s missing; run `make images` (it needs `make jsprober-deps`)", image("jsprober"))
	}
	s := upStack(t, map[string]string{"SPLITLET_PODWORKERS": "1"}, "compose.yaml", "compose.shadow-jsprober.yaml")
	s.waitNodeReady(t)
	const web, js = "shadow-web", "shadow-js"
	s.create(t, webPod(web, firstPort))
	s.create(t, jsPod(js, jsPort))
	testenv.Eventually(t, 90*time.Second, "both pods Running and Ready", func() (bool, string) {
		var waiting []string
		for _, n := range []string{web, js} {
			p, err := s.cs.CoreV1().Pods(namespace).Get(t.Context(), n, metav1.GetOptions{})
			if err != nil || !runningReady(p) {
				waiting = append(waiting, fmt.Sprintf("%s: %v", n, err))
			}
		}
		return len(waiting) == 0, strings.Join(waiting, "; ")
	})

	nc, err := s.natsConnect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	jsc, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var diffs []string
	sum, err := recording.Live(ctx, jsc, recording.LiveOptions{Node: nodeName, Stage: bus.StageProber, Settle: 5 * time.Second}, func(ev recording.LiveEvent) {
		if d := ev.Difference; d != nil {
			diffs = append(diffs, fmt.Sprintf("%s:\n  live   %v\n  shadow %v", d.Key, d.Live, d.Shadow))
		}
	})
	if err != nil {
		t.Fatalf("live diff: %v", err)
	}
	t.Logf("live diff: %+v", sum)
	if len(diffs) > 0 {
		t.Errorf("the live diff found differences between the Go prober and its jsprober shadow:\n%s", strings.Join(diffs, "\n"))
	}
	// web's readiness and liveness, js's startup and two readiness probes.
	if sum.Live == 0 || sum.Shadow == 0 || sum.Keys < 5 {
		t.Errorf("live diff summary %+v: want both sides' results of the pods' five probes", sum)
	}
}
