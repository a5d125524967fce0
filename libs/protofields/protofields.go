// Package protofields walks the fields of an encoded protobuf message
// without its generated code: for readers that take a few fields of a
// message whose generated package they cannot link (the bus's hand-written
// payload decoders; the tracing transport, whose collector package would
// bring gRPC with it).
package protofields

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Walk calls fn with every varint field (v) and every length-delimited
// field (data, never nil for one, even when empty) of message b, in the
// order they come; fields of other wire types are skipped. It stops at
// fn's first error and returns it as it is; a message that does not parse
// is a *MalformedError.
func Walk(b []byte, fn func(n protowire.Number, v uint64, data []byte) error) error {
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return &MalformedError{Err: protowire.ParseError(l)}
		}
		b = b[l:]
		var v uint64
		var data []byte
		switch typ {
		case protowire.VarintType:
			v, l = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			data, l = protowire.ConsumeBytes(b)
		default:
			l = protowire.ConsumeFieldValue(n, typ, b)
		}
		if l < 0 {
			return &MalformedError{Field: n, Err: protowire.ParseError(l)}
		}
		b = b[l:]
		if typ != protowire.VarintType && typ != protowire.BytesType {
			continue
		}
		if err := fn(n, v, data); err != nil {
			return err
		}
	}
	return nil
}

// MalformedError is a message that does not parse: a tag (Field 0) or the
// value of field Field.
type MalformedError struct {
	Field protowire.Number
	Err   error
}

func (e *MalformedError) Error() string {
	if e.Field == 0 {
		return fmt.Sprintf("malformed protobuf: %v", e.Err)
	}
	return fmt.Sprintf("malformed protobuf in field %d: %v", e.Field, e.Err)
}

func (e *MalformedError) Unwrap() error { return e.Err }

// Keep returns the fields of message b whose numbers keep accepts, each
// with its tag and in the order they come: a message of those fields
// alone, for generated code to decode without the rest. A message none of
// whose fields is kept gives nil.
func Keep(b []byte, keep func(protowire.Number) bool) ([]byte, error) {
	var out []byte
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil, &MalformedError{Err: protowire.ParseError(l)}
		}
		v := protowire.ConsumeFieldValue(n, typ, b[l:])
		if v < 0 {
			return nil, &MalformedError{Field: n, Err: protowire.ParseError(v)}
		}
		if keep(n) {
			out = append(out, b[:l+v]...)
		}
		b = b[l+v:]
	}
	return out, nil
}
