// Command permtable writes docs/bus.md's table of the bus identities'
// permissions from the code (bus.PermissionTable), between its markers:
//
//	go run ./libs/bus/cmd/permtable            # from the repository's root
//	go run ./libs/bus/cmd/permtable -doc PATH
//
// TestPermissionTableInDocs (libs/bus) fails when the page and the code
// differ.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/splitlet/splitlet/libs/bus"
)

func main() {
	doc := flag.String("doc", "docs/bus.md", "the page to write the table into")
	flag.Parse()
	if err := write(*doc); err != nil {
		fmt.Fprintf(os.Stderr, "permtable: %v\n", err)
		os.Exit(1)
	}
}

func write(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := bus.ReplacePermissionTable(string(data), bus.PermissionTable())
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if out == string(data) {
		return nil
	}
	return os.WriteFile(path, []byte(out), 0o644)
}
