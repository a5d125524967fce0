package bus

import (
	"context"
	"fmt"
	"testing"

	"github.com/splitlet/splitlet/libs/testenv"
)

// Streams made by EnsureStreams are seen as conforming afterwards (the
// server's normalised settings included), so that a stage that may not
// manage streams never tries to.
func TestMadeStreamsConform(t *testing.T) {
	n := testenv.NATSForTest(t)
	_, js := n.Connect(t)
	ctx := context.Background()
	if err := EnsureStreamsReplicas(ctx, js, "conform", 1); err != nil {
		t.Fatal(err)
	}
	for _, want := range StreamConfigs("conform", 1) {
		s, err := js.Stream(ctx, want.Name)
		if err != nil {
			t.Fatal(err)
		}
		have := s.CachedInfo().Config
		if !conforms(have, want) {
			t.Errorf("%s does not conform:\nhave %s\nwant %s", want.Name, fmt.Sprintf("%+v", have), fmt.Sprintf("%+v", want))
		}
	}
}
