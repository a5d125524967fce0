package bus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/protofields"
)

// Encoding is a message's wire form: JSON or protobuf. The form is named
// by the message's Content-Type header; a message without one is JSON.
type Encoding uint8

// The encodings. The zero value is JSON, so that an Envelope built as a
// literal is JSON; publishers default to protobuf.
const (
	EncodingJSON Encoding = iota
	EncodingProtobuf
)

// The Content-Type header and its values.
const (
	HeaderContentType   = "Content-Type"
	ContentTypeJSON     = "application/json"
	ContentTypeProtobuf = "application/vnd.splitlet.bus.v2+protobuf"
)

// The schemaVersion a message carries: its form's version. JSON messages
// carry 1, protobuf ones 2.
const (
	SchemaVersionJSON     = 1
	SchemaVersionProtobuf = 2
)

func (enc Encoding) String() string {
	if enc == EncodingJSON {
		return "json"
	}
	return "protobuf"
}

// ContentType is the header value that names the encoding.
func (enc Encoding) ContentType() string {
	if enc == EncodingJSON {
		return ContentTypeJSON
	}
	return ContentTypeProtobuf
}

// encodingOf reads a Content-Type header value; ok is false for a value this
// contract does not know.
func encodingOf(contentType string) (Encoding, bool) {
	mt, _, _ := strings.Cut(contentType, ";")
	switch strings.TrimSpace(strings.ToLower(mt)) {
	case ContentTypeJSON:
		return EncodingJSON, true
	case ContentTypeProtobuf:
		return EncodingProtobuf, true
	}
	return 0, false
}

// protoPayload is a payload with a protobuf form (docs/bus.md gives the
// schema). The kinds without one travel as JSON whatever the publisher's
// encoding: they are few and small (readiness, requests and replies).
type protoPayload interface {
	appendProto(b []byte) ([]byte, error)
	unmarshalProto(b []byte) error
}

// The envelope's field numbers (message Envelope in docs/bus.md).
const (
	envSchemaVersion protowire.Number = 1
	envKind          protowire.Number = 2
	envNode          protowire.Number = 3
	envSource        protowire.Number = 4
	envOp            protowire.Number = 5
	envSeq           protowire.Number = 6
	envSentAt        protowire.Number = 7 // Unix time in nanoseconds
	envPayload       protowire.Number = 8
)

func appendString(b []byte, n protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, n, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendBytes(b []byte, n protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, n, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendVarint(b []byte, n protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, n, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendBool(b []byte, n protowire.Number, v bool) []byte {
	if !v {
		return b
	}
	return appendVarint(b, n, 1)
}

// gogoMessage is a Kubernetes API type's generated protobuf side.
type gogoMessage interface {
	Size() int
	MarshalToSizedBuffer([]byte) (int, error)
}

// appendMessage appends an embedded Kubernetes message without an extra copy.
func appendMessage(b []byte, n protowire.Number, m gogoMessage) ([]byte, error) {
	size := m.Size()
	b = protowire.AppendTag(b, n, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	start := len(b)
	b = append(b, make([]byte, size)...)
	if _, err := m.MarshalToSizedBuffer(b[start:]); err != nil {
		return nil, err
	}
	return b, nil
}

// protoFields walks a protobuf message's fields, calling fn with each field's
// number, wire type and value: for a varint the value is in v, for bytes in
// data. Fields fn does not know it must ignore (a newer publisher's).
func protoFields(b []byte, path string, fn func(n protowire.Number, v uint64, data []byte) error) error {
	err := protofields.Walk(b, fn)
	if bad, ok := err.(*protofields.MalformedError); ok {
		// this message's own parse error; fn's come back as they are.
		return fieldErr(path, "%v", bad)
	}
	return err
}

// wantType checks that a known field came with the wire type its schema has.
func wantType(path string, isBytes bool, data []byte) error {
	if isBytes != (data != nil) {
		return wrongType(path)
	}
	return nil
}

// wrongType is the error of a field that came with the wrong wire type.
func wrongType(path string) error {
	return fieldErr(path, "has the wrong protobuf wire type")
}

// marshalProtoEnvelope returns the protobuf form of an envelope whose payload
// is already in protobuf.
func marshalProtoEnvelope(e *Envelope) []byte {
	b := make([]byte, 0, len(e.Payload)+32+len(e.Kind)+len(e.Node)+len(e.Source)+len(e.Op))
	b = appendVarint(b, envSchemaVersion, uint64(e.SchemaVersion))
	b = appendString(b, envKind, string(e.Kind))
	b = appendString(b, envNode, e.Node)
	b = appendString(b, envSource, e.Source)
	b = appendString(b, envOp, string(e.Op))
	b = appendVarint(b, envSeq, e.Seq)
	b = appendVarint(b, envSentAt, uint64(e.SentAt.UnixNano()))
	return appendBytes(b, envPayload, e.Payload)
}

// unmarshalProtoEnvelope parses an envelope's protobuf form; Validate checks it.
func unmarshalProtoEnvelope(data []byte) (*Envelope, error) {
	e := &Envelope{Encoding: EncodingProtobuf}
	err := protoFields(data, "(message)", func(n protowire.Number, v uint64, d []byte) error {
		var err error
		switch n {
		case envSchemaVersion:
			err = wantType("schemaVersion", false, d)
			e.SchemaVersion = int(v)
		case envKind:
			err = wantType("kind", true, d)
			e.Kind = Kind(d)
		case envNode:
			err = wantType("node", true, d)
			e.Node = string(d)
		case envSource:
			err = wantType("source", true, d)
			e.Source = string(d)
		case envOp:
			err = wantType("op", true, d)
			e.Op = Op(d)
		case envSeq:
			err = wantType("seq", false, d)
			e.Seq = v
		case envSentAt:
			err = wantType("sentAt", false, d)
			if v != 0 {
				e.SentAt = time.Unix(0, int64(v)).UTC()
			}
		case envPayload:
			err = wantType("payload", true, d)
			e.Payload = d
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// PodUpdate: 1 repeated k8s.io.api.core.v1.Pod pods; 2 SnapshotPart snapshot.
func (p *PodUpdate) appendProto(b []byte) ([]byte, error) {
	var err error
	for i := range p.Pods {
		if b, err = appendMessage(b, 1, &p.Pods[i]); err != nil {
			return nil, fmt.Errorf("pods[%d]: %w", i, err)
		}
	}
	if s := p.Snapshot; s != nil {
		var sb []byte
		sb = appendString(sb, 1, s.ID)
		sb = appendVarint(sb, 2, uint64(s.Part))
		sb = appendVarint(sb, 3, uint64(s.Parts))
		b = appendBytes(b, 2, sb)
	}
	return b, nil
}

func (p *PodUpdate) unmarshalProto(b []byte) error { return p.unmarshalProtoWith(b, nil) }

// unmarshalProtoWith decodes each pod with dec (nil: whole).
func (p *PodUpdate) unmarshalProtoWith(b []byte, dec PodDecoder) error {
	if dec == nil {
		dec = func(raw []byte, pod *corev1.Pod) error { return pod.Unmarshal(raw) }
	}
	// an empty SET reads as JSON's "pods": [], not null. The array is made
	// to the message's count of pods: a receiver that keeps some of them
	// keeps no room for more.
	p.Pods = make([]corev1.Pod, 0, countField(b, 1))
	return protoFields(b, "payload", func(n protowire.Number, _ uint64, d []byte) error {
		switch n {
		case 1:
			// (the field's path is only formatted for an error)
			i := len(p.Pods)
			if d == nil {
				return wrongType(fmt.Sprintf("payload.pods[%d]", i))
			}
			p.Pods = append(p.Pods, corev1.Pod{})
			if err := dec(d, &p.Pods[i]); err != nil {
				return fieldErr(fmt.Sprintf("payload.pods[%d]", i), "malformed Pod: %v", err)
			}
		case 2:
			if err := wantType("payload.snapshot", true, d); err != nil {
				return err
			}
			s := &SnapshotPart{}
			p.Snapshot = s
			return protoFields(d, "payload.snapshot", func(n protowire.Number, v uint64, d []byte) error {
				switch n {
				case 1:
					s.ID = string(d)
				case 2:
					s.Part = int(int32(v))
				case 3:
					s.Parts = int(int32(v))
				}
				return nil
			})
		}
		return nil
	})
}

// The fields of Kubernetes' protobuf Pod, for PodDecoders that pick some.
const (
	PodFieldMetadata protowire.Number = 1
	PodFieldSpec     protowire.Number = 2
	PodFieldStatus   protowire.Number = 3
)

// The fields of Kubernetes' protobuf PodStatus that stages keep of a bus
// pod (PodSpecAndStatus).
const (
	PodStatusPhase     protowire.Number = 1
	PodStatusMessage   protowire.Number = 3
	PodStatusReason    protowire.Number = 4
	PodStatusStartTime protowire.Number = 7
	PodStatusQOSClass  protowire.Number = 9
)

// PodSpecAndStatus returns a PodDecoder that fills in the pod's metadata
// and spec whole and, of its status, only the given fields: the rest of a
// running pod's status (conditions, container statuses, addresses) is a
// third of its bytes or more, and a stage that owns none of it need not
// decode it.
func PodSpecAndStatus(status ...protowire.Number) PodDecoder {
	return func(raw []byte, p *corev1.Pod) error {
		return protofields.Walk(raw, func(n protowire.Number, _ uint64, d []byte) error {
			switch {
			case d == nil:
			case n == PodFieldMetadata:
				return p.ObjectMeta.Unmarshal(d)
			case n == PodFieldSpec:
				return p.Spec.Unmarshal(d)
			case n == PodFieldStatus:
				kept, err := protofields.Keep(d, func(n protowire.Number) bool { return slices.Contains(status, n) })
				if err != nil {
					return err
				}
				return p.Status.Unmarshal(kept)
			}
			return nil
		})
	}
}

// PodMetadata is a PodDecoder that fills in the pod's metadata alone.
func PodMetadata(raw []byte, p *corev1.Pod) error {
	return protofields.Walk(raw, func(n protowire.Number, _ uint64, d []byte) error {
		if n == PodFieldMetadata && d != nil {
			return p.ObjectMeta.Unmarshal(d)
		}
		return nil
	})
}

// PodRuntimeStatus: 1 uid, 2 namespace, 3 name, 4 podIP, 5 hostIP,
// 6 k8s.io.apimachinery.pkg.apis.meta.v1.Time startTime, 7 phase, 8 reason,
// 9 message, 10/11/12 repeated k8s.io.api.core.v1.ContainerStatus (init,
// app, ephemeral), 13 map<string, string> containerHashes, 14 terminating,
// 15 terminated, 16 repeated k8s.io.api.core.v1.PodCondition conditions.
func (p *PodRuntimeStatus) appendProto(b []byte) ([]byte, error) {
	b = appendString(b, 1, string(p.UID))
	b = appendString(b, 2, p.Namespace)
	b = appendString(b, 3, p.Name)
	b = appendString(b, 4, p.PodIP)
	b = appendString(b, 5, p.HostIP)
	var err error
	if p.StartTime != nil {
		if b, err = appendMessage(b, 6, p.StartTime); err != nil {
			return nil, err
		}
	}
	b = appendString(b, 7, string(p.Phase))
	b = appendString(b, 8, p.Reason)
	b = appendString(b, 9, p.Message)
	for _, f := range []struct {
		n  protowire.Number
		cs []corev1.ContainerStatus
	}{{10, p.InitContainerStatuses}, {11, p.ContainerStatuses}, {12, p.EphemeralContainerStatuses}} {
		for i := range f.cs {
			if b, err = appendMessage(b, f.n, &f.cs[i]); err != nil {
				return nil, err
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(p.ContainerHashes)) {
		var eb []byte
		eb = appendString(eb, 1, id)
		eb = appendString(eb, 2, p.ContainerHashes[id])
		b = appendBytes(b, 13, eb)
	}
	b = appendBool(b, 14, p.Terminating)
	b = appendBool(b, 15, p.Terminated)
	for i := range p.Conditions {
		if b, err = appendMessage(b, 16, &p.Conditions[i]); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// SameAs reports whether p and q have the same protobuf form, so that a
// receiver would read the same from either. The form is deterministic
// (containerHashes in key order), so equal statuses compare equal; a
// difference the API's semantic comparison would overlook (a quantity
// written another way) reads as a change. bufs are two scratch buffers the
// caller keeps for the next call (nil at first); the comparison allocates
// nothing once they have grown.
func (p *PodRuntimeStatus) SameAs(q *PodRuntimeStatus, bufs *[2][]byte) (bool, error) {
	var err error
	if bufs[0], err = p.appendProto(bufs[0][:0]); err != nil {
		return false, err
	}
	if bufs[1], err = q.appendProto(bufs[1][:0]); err != nil {
		return false, err
	}
	return bytes.Equal(bufs[0], bufs[1]), nil
}

func (p *PodRuntimeStatus) unmarshalProto(b []byte) error {
	var uid, phase string
	err := protoFields(b, "payload", func(n protowire.Number, v uint64, d []byte) error {
		switch n {
		case 1:
			return protoString(&uid, "payload.uid", d)
		case 2:
			return protoString(&p.Namespace, "payload.namespace", d)
		case 3:
			return protoString(&p.Name, "payload.name", d)
		case 4:
			return protoString(&p.PodIP, "payload.podIP", d)
		case 5:
			return protoString(&p.HostIP, "payload.hostIP", d)
		case 6:
			if err := wantType("payload.startTime", true, d); err != nil {
				return err
			}
			t := &metav1.Time{}
			if err := t.Unmarshal(d); err != nil {
				return fieldErr("payload.startTime", "malformed Time: %v", err)
			}
			p.StartTime = t
		case 7:
			return protoString(&phase, "payload.phase", d)
		case 8:
			return protoString(&p.Reason, "payload.reason", d)
		case 9:
			return protoString(&p.Message, "payload.message", d)
		case 10:
			return protoStatus(&p.InitContainerStatuses, "payload.initContainerStatuses", d)
		case 11:
			return protoStatus(&p.ContainerStatuses, "payload.containerStatuses", d)
		case 12:
			return protoStatus(&p.EphemeralContainerStatuses, "payload.ephemeralContainerStatuses", d)
		case 13:
			if err := wantType("payload.containerHashes", true, d); err != nil {
				return err
			}
			var k, val string
			if err := protoFields(d, "payload.containerHashes", func(n protowire.Number, _ uint64, d []byte) error {
				switch n {
				case 1:
					k = string(d)
				case 2:
					val = string(d)
				}
				return nil
			}); err != nil {
				return err
			}
			if p.ContainerHashes == nil {
				p.ContainerHashes = map[string]string{}
			}
			p.ContainerHashes[k] = val
		case 14:
			p.Terminating = v != 0
		case 15:
			p.Terminated = v != 0
		case 16:
			path := fmt.Sprintf("payload.conditions[%d]", len(p.Conditions))
			if err := wantType(path, true, d); err != nil {
				return err
			}
			var c corev1.PodCondition
			if err := c.Unmarshal(d); err != nil {
				return fieldErr(path, "malformed PodCondition: %v", err)
			}
			p.Conditions = append(p.Conditions, c)
		}
		return nil
	})
	p.UID, p.Phase = types.UID(uid), corev1.PodPhase(phase)
	return err
}

// protoString takes a string field's value.
func protoString(dst *string, path string, d []byte) error {
	if err := wantType(path, true, d); err != nil {
		return err
	}
	*dst = string(d)
	return nil
}

// protoStatus appends a repeated ContainerStatus field's next value (the
// field's path is only formatted for an error).
func protoStatus(dst *[]corev1.ContainerStatus, path string, d []byte) error {
	i := len(*dst)
	if d == nil {
		return wrongType(fmt.Sprintf("%s[%d]", path, i))
	}
	*dst = append(*dst, corev1.ContainerStatus{})
	if err := (*dst)[i].Unmarshal(d); err != nil {
		return fieldErr(fmt.Sprintf("%s[%d]", path, i), "malformed ContainerStatus: %v", err)
	}
	return nil
}

// countField counts the values of field n of a protobuf message, to size
// what they are decoded into; it stops, with what it has counted, where the
// message is malformed (the decoding that follows reports it).
func countField(b []byte, n protowire.Number) int {
	count := 0
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return count
		}
		b = b[l:]
		if l = protowire.ConsumeFieldValue(num, typ, b); l < 0 {
			return count
		}
		b = b[l:]
		if num == n {
			count++
		}
	}
	return count
}

// ProbeResult: 1 podUID, 2 namespace, 3 name, 4 container, 5 containerID,
// 6 probe, 7 result, 8 message; all strings.
func (p *ProbeResult) appendProto(b []byte) ([]byte, error) {
	for i, s := range p.protoStrings() {
		b = appendString(b, protowire.Number(i+1), *s)
	}
	return b, nil
}

func (p *ProbeResult) protoStrings() []*string {
	return []*string{(*string)(&p.PodUID), &p.Namespace, &p.Name, &p.Container, &p.ContainerID,
		(*string)(&p.Probe), (*string)(&p.Result), &p.Message}
}

func (p *ProbeResult) unmarshalProto(b []byte) error {
	fields := p.protoStrings()
	return protoFields(b, "payload", func(n protowire.Number, _ uint64, d []byte) error {
		if n < 1 || int(n) > len(fields) {
			return nil
		}
		return protoString(fields[n-1], "payload", d)
	})
}

// AsJSON returns the message in its JSON form, for what reads JSON only
// (recordings, a person): itself when it is JSON already.
func (e *Envelope) AsJSON() (*Envelope, error) {
	if e.Encoding == EncodingJSON {
		return e, nil
	}
	var v protoPayload
	switch e.Kind {
	case KindPodUpdate:
		v = &PodUpdate{}
	case KindPodRuntimeStatus:
		v = &PodRuntimeStatus{}
	case KindProbeResult:
		v = &ProbeResult{}
	default:
		return nil, fieldErr("kind", "%s has no protobuf form", e.Kind)
	}
	if err := v.unmarshalProto(e.Payload); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := *e
	out.Encoding, out.SchemaVersion, out.Payload = EncodingJSON, SchemaVersionJSON, raw
	return &out, nil
}
