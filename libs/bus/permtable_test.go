package bus_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splitlet/splitlet/libs/bus"
)

// docs/bus.md's permission table is the code's: a change of the
// permissions that does not reach the page fails here (write it with
// `go run ./libs/bus/cmd/permtable`).
func TestPermissionTableInDocs(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "bus.md")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := bus.ReplacePermissionTable(string(data), bus.PermissionTable())
	if err != nil {
		t.Fatal(err)
	}
	if want != string(data) {
		t.Errorf("docs/bus.md's permission table differs from the code's; run `go run ./libs/bus/cmd/permtable`. The code's:\n%s", bus.PermissionTable())
	}
	// the table shows what the permissions hold.
	for _, want := range []string{"`runtime.probeexec.*`", "`_INBOX.prober.>`", "durable `statussync-probes`"} {
		if !strings.Contains(bus.PermissionTable(), want) {
			t.Errorf("the table lacks %s", want)
		}
	}
}
