package bus_test

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
)

// TestPartitionMatchesServerMapping publishes pod UIDs through a real
// nats-server subject mapping with partition() and checks that the server
// puts every UID in the partition bus.Partition computes.
func TestPartitionMatchesServerMapping(t *testing.T) {
	for _, parts := range []int{1, 3, 16, 64} {
		t.Run(fmt.Sprintf("partitions=%d", parts), func(t *testing.T) {
			n := testenv.NATSForTest(t)
			src := "in.*"
			dst := fmt.Sprintf("out.{{partition(%d,1)}}.{{wildcard(1)}}", parts)
			if err := n.Server.GlobalAccount().AddMapping(src, dst); err != nil {
				t.Fatal(err)
			}
			nc, _ := n.Connect(t)
			sub, err := nc.SubscribeSync("out.>")
			if err != nil {
				t.Fatal(err)
			}
			const count = 500
			uids := make([]string, count)
			for i := range uids {
				uids[i] = string(uuid.NewUUID())
				if err := nc.Publish("in."+uids[i], nil); err != nil {
					t.Fatal(err)
				}
			}
			seen := map[int]bool{}
			for i := 0; i < count; i++ {
				msg, err := sub.NextMsg(5 * time.Second)
				if err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
				var got int
				var uid string
				if _, err := fmt.Sscanf(replaceDots(msg.Subject), "out %d %s", &got, &uid); err != nil {
					t.Fatalf("subject %q: %v", msg.Subject, err)
				}
				if want := bus.Partition(uid, parts); got != want {
					t.Fatalf("uid %s: server partition %d, bus.Partition %d", uid, got, want)
				}
				seen[got] = true
			}
			if parts > 1 && len(seen) < 2 {
				t.Fatalf("all %d UIDs fell in one partition: %v", count, seen)
			}
		})
	}
}

func replaceDots(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == '.' {
			b[i] = ' '
		}
	}
	return string(b)
}

func TestPartitionOf(t *testing.T) {
	s := bus.For("node-a.example")
	if got := s.PodUpdates(7); got != "splitlet.v1.node-a_example.podupdates.7" {
		t.Fatalf("subject %q", got)
	}
	if p, ok := bus.PartitionOf(s.PodUpdates(12)); !ok || p != 12 {
		t.Fatalf("PartitionOf = %d, %v", p, ok)
	}
	if got := s.PodReconciles(7); got != "splitlet.v1.node-a_example.podupdates.reconcile.7" {
		t.Fatalf("reconcile subject %q", got)
	}
	if p, ok := bus.PartitionOf(s.PodReconciles(12)); !ok || p != 12 {
		t.Fatalf("PartitionOf(reconcile) = %d, %v", p, ok)
	}
	for _, bad := range []string{"", "a.", "a.b", "a.1x", s.AgentReady()} {
		if _, ok := bus.PartitionOf(bad); ok {
			t.Errorf("PartitionOf(%q) ok", bad)
		}
	}
	if got := bus.NodeFromToken(bus.NodeToken("a.b.c")); got != "a.b.c" {
		t.Fatalf("node token round trip: %q", got)
	}
}
