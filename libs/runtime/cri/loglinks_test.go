package cri

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splitlet/splitlet/libs/testenv"
)

// TestContainerLogLinks: a started container's log is linked from the
// container log directory as the kubelet names it; the link of an instance
// dropped by a later start goes with it, and the rest with the pod.
func TestContainerLogLinks(t *testing.T) {
	r := newRuntime(t)
	p := newPod("linked", true, shell("c", `echo hello; exit 1`))
	cleanupPod(t, p)
	var links []string
	for attempt := range 3 {
		st := start(t, r, p, 0, attempt)
		waitExited(t, r, p.UID, st.ID)
		link := filepath.Join(linkDir, "linked_default_c-"+r.rawID(st.ID)+".log")
		target, err := os.Readlink(link)
		if err != nil || target != st.LogPath {
			t.Fatalf("attempt %d: link %s -> %q, %v; want -> %s", attempt, link, target, err, st.LogPath)
		}
		testenv.Eventually(t, 10*time.Second, "the log through its link", func() (bool, string) {
			data, err := os.ReadFile(link)
			return err == nil && strings.Contains(string(data), "hello"), string(data)
		})
		links = append(links, link)
	}
	// The third start dropped the first instance (two are kept).
	if _, err := os.Lstat(links[0]); !os.IsNotExist(err) {
		t.Errorf("link of the dropped instance: %v, want it gone", err)
	}
	if err := r.RemovePod(t.Context(), p.UID); err != nil {
		t.Fatal(err)
	}
	for _, l := range links[1:] {
		if _, err := os.Lstat(l); !os.IsNotExist(err) {
			t.Errorf("link %s after RemovePod: %v, want it gone", l, err)
		}
	}
}
