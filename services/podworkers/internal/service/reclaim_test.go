package service

import (
	"context"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/testenv"
)

// A ReclaimRequest on runtime.reclaim.0 makes the owner of partition 0
// remove every unused image at once, whatever its own GC period, and answer
// with the bytes freed; no other partition serves it. The containerd is the
// test's own, so that no other test's images go.
func TestReclaimRemovesUnusedImages(t *testing.T) {
	testenv.SkipShort(t, "containerd")
	cd, _ := testenv.OwnContainerd(t, "reclaim")
	const unused = "splitlet.test/reclaim:1"
	if err := cd.ImportUniqueImage(t.Context(), unused); err != nil {
		t.Fatal(err)
	}
	criEndpoint = cd.Endpoint
	t.Cleanup(func() { criEndpoint = config.DefaultCRIEndpoint })
	e := newEnv(t, "pw-reclaim")
	r := e.startReplica(t, config.RuntimeCRI, func(c *Config) {
		c.GC.ImageMinAge = 0
		c.GC.ImagePeriod = time.Hour // no periodic run: only the request removes it
	})
	// acquired, not only active: its responders are subscribed.
	eventually(t, 30*time.Second, "partition 0 acquired", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.parts[gcPartition] != nil
	})

	request := func(p int) (*bus.ReclaimResult, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		env, err := e.pub.Request(ctx, bus.For(e.node).Reclaim(p), bus.KindReclaimRequest, &bus.ReclaimRequest{Signal: "nodefs.available"})
		if err != nil {
			return nil, err
		}
		return bus.DecodeReclaimResult(env)
	}
	if _, err := request(1); err == nil {
		t.Error("partition 1's owner answered a reclaim request")
	}
	res, err := request(gcPartition)
	if err != nil || res.Error != "" || res.ImageBytesFreed <= 0 {
		t.Fatalf("reclaim: %+v, %v; want bytes freed, no error", res, err)
	}
	is, err := remote.NewRemoteImageService(t.Context(), cd.Endpoint, 30*time.Second, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer is.Close(context.Background())
	st, err := is.ImageStatus(t.Context(), &runtimeapi.ImageSpec{Image: unused}, false)
	if err != nil || st.GetImage() != nil {
		t.Fatalf("the unused image after reclaim: %v, %v; want gone", st.GetImage(), err)
	}
}
