package selftest_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/bus/bustest"
	"github.com/splitlet/splitlet/libs/conformance"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/services/nodehb"
	"github.com/splitlet/splitlet/services/podconfig"
	"github.com/splitlet/splitlet/services/podworkers"
	"github.com/splitlet/splitlet/services/prober"
	"github.com/splitlet/splitlet/services/statussync"
)

// TestSplitletStages: each of Splitlet's stages passes its conformance
// suite. One API server for all; each stage has its own NATS server and
// node name.
func TestSplitletStages(t *testing.T) {
	cp := testenv.ControlPlaneForTest(t)
	stage := func(t *testing.T, node string) conformance.Target {
		nats := testenv.NATSForTest(t)
		return conformance.Target{NATSURL: nats.URL, Node: node, Partitions: 4, Config: cp.Config}
	}
	common := func(tg conformance.Target) []string {
		return []string{"--nats-url=" + tg.NATSURL, "--node-name=" + tg.Node, "--partitions=4", "--kubeconfig=" + cp.Kubeconfig}
	}
	t.Run("prober", func(t *testing.T) {
		tg := stage(t, "selftest-prober")
		apptest.Start(t, "prober", common(tg), prober.Service())
		conformance.Prober(t, tg)
	})
	t.Run("prober-shadow", func(t *testing.T) {
		// the prober as a shadow (--shadow): the kit's shadow cases, with
		// the API server checked for Events it must not write.
		tg := stage(t, "selftest-prober-shadow")
		apptest.Start(t, "prober", append(common(tg), "--shadow"), prober.Service())
		conformance.ProberShadow(t, tg)
	})
	t.Run("podworkers", func(t *testing.T) {
		tg := stage(t, "selftest-podworkers")
		apptest.Start(t, "podworkers", common(tg), podworkers.Service())
		conformance.PodWorkers(t, tg)
	})
	t.Run("statussync", func(t *testing.T) {
		tg := stage(t, "selftest-statussync")
		apptest.Start(t, "statussync", common(tg), statussync.Service())
		conformance.StatusSync(t, tg)
	})
	t.Run("nodehb", func(t *testing.T) {
		tg := stage(t, "selftest-nodehb")
		port, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		// the cri runtime's nodehb serves device plugins, here in a
		// directory of the test's (short: a socket path has at most 107 bytes).
		tg.DevicePluginsDir, err = os.MkdirTemp("", "dp")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(tg.DevicePluginsDir) })
		apptest.Start(t, "nodehb", append(common(tg), fmt.Sprintf("--nodehb.port=%d", port),
			"--nodehb.client-ca-file="+cp.CAFile, "--nodehb.node-status-update-frequency=1s",
			// the kit's not-ready case waits its timeout, not nodehb's 20 s default grace
			"--nodehb.agent-not-ready-grace=1s",
			"--runtime=cri", "--nodehb.device-plugins-dir="+tg.DevicePluginsDir), nodehb.Service())
		conformance.NodeHB(t, tg)
	})
	t.Run("statussync-shadow", func(t *testing.T) {
		// statussync as a shadow, under its shadow identity: the kit's
		// shadow cases (its writes published, none sent), no permission
		// violation.
		const node = "selftest-statussync-shadow"
		n := bustest.Start(t, node)
		apptest.Start(t, "statussync", []string{"--nats-url=" + n.URL, "--nats-nkey=" + n.Seed(bus.ShadowIdentity(bus.StageStatussync)),
			"--node-name=" + node, "--partitions=4", "--kubeconfig=" + cp.Kubeconfig, "--shadow"}, statussync.Service())
		conformance.StatusSyncShadow(t, conformance.Target{NATSURL: n.URL, NATSOptions: n.Options(t, bus.AdminIdentity), Node: node, Partitions: 4, Config: cp.Config})
		if v := n.Violations.All(); len(v) > 0 {
			t.Errorf("permission violations:\n%s", strings.Join(v, "\n"))
		}
	})
	t.Run("podworkers-shadow", func(t *testing.T) {
		// the pod workers as a shadow, under their shadow identity: the
		// kit's shadow cases (statuses under the shadow prefix, the live
		// runtime's containers, nothing live), no permission violation.
		const node = "selftest-podworkers-shadow"
		n := bustest.Start(t, node)
		apptest.Start(t, "podworkers", []string{"--nats-url=" + n.URL, "--nats-nkey=" + n.Seed(bus.ShadowIdentity(bus.StagePodworkers)),
			"--node-name=" + node, "--partitions=4", "--kubeconfig=" + cp.Kubeconfig, "--shadow"}, podworkers.Service())
		conformance.PodWorkersShadow(t, conformance.Target{NATSURL: n.URL, NATSOptions: n.Options(t, bus.AdminIdentity), Node: node, Partitions: 4, Config: cp.Config})
		if v := n.Violations.All(); len(v) > 0 {
			t.Errorf("permission violations:\n%s", strings.Join(v, "\n"))
		}
	})
	t.Run("podconfig", func(t *testing.T) {
		tg := stage(t, "selftest-podconfig")
		apptest.Start(t, "podconfig", common(tg), podconfig.Service())
		conformance.PodConfig(t, tg)
	})
}
