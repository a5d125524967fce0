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

// Keep copies the kept fields, of any wire type and repeated ones each
// time, with their tags and in order, and reports a malformed message.
func TestKeep(t *testing.T) {
	field := func(b []byte, n protowire.Number, v uint64) []byte {
		switch n {
		case 2:
			return protowire.AppendFixed32(protowire.AppendTag(b, n, protowire.Fixed32Type), uint32(v))
		case 3, 5:
			return protowire.AppendBytes(protowire.AppendTag(b, n, protowire.BytesType), []byte{byte(v)})
		}
		return protowire.AppendVarint(protowire.AppendTag(b, n, protowire.VarintType), v)
	}
	var in, want []byte
	for i, n := range []protowire.Number{1, 2, 3, 4, 5, 3} {
		in = field(in, n, uint64(i))
		if n != 1 && n != 4 {
			want = field(want, n, uint64(i))
		}
	}
	got, err := Keep(in, func(n protowire.Number) bool { return n != 1 && n != 4 })
	if err != nil || string(got) != string(want) {
		t.Errorf("Keep = %x, %v; want %x", got, err, want)
	}
	if got, err := Keep(in, func(protowire.Number) bool { return false }); err != nil || got != nil {
		t.Errorf("Keep of nothing = %x, %v; want nil", got, err)
	}
	var m *MalformedError
	if _, err := Keep(in[:len(in)-1], func(protowire.Number) bool { return true }); !errors.As(err, &m) {
		t.Errorf("Keep of a cut message: %v, want a *MalformedError", err)
	}
}
