package protofields

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

func TestWalk(t *testing.T) {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, 7)
	b = protowire.AppendTag(b, 2, protowire.Fixed32Type) // skipped
	b = protowire.AppendFixed32(b, 9)
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("x"))
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	b = protowire.AppendBytes(b, nil)
	type field struct {
		n     protowire.Number
		v     uint64
		data  string
		bytes bool
	}
	var got []field
	if err := Walk(b, func(n protowire.Number, v uint64, data []byte) error {
		got = append(got, field{n, v, string(data), data != nil})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []field{{1, 7, "", false}, {3, 0, "x", true}, {4, 0, "", true}}
	if len(got) != len(want) {
		t.Fatalf("fields %+v; want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("fields %+v; want %+v", got, want)
		}
	}

	stop := errors.New("stop")
	if err := Walk(b, func(protowire.Number, uint64, []byte) error { return stop }); err != stop {
		t.Fatalf("fn's error came back as %v", err)
	}

	for in, want := range map[string]string{
		"\xff":         "malformed protobuf: ",
		"\x1a\x05abc":  "malformed protobuf in field 3: ",
		"\x08\xff\xff": "malformed protobuf in field 1: ",
	} {
		err := Walk([]byte(in), func(protowire.Number, uint64, []byte) error { return nil })
		var bad *MalformedError
		if !errors.As(err, &bad) || len(err.Error()) <= len(want) || err.Error()[:len(want)] != want {
			t.Errorf("Walk(%q) = %v; want a MalformedError %q…", in, err, want)
		}
	}
}
