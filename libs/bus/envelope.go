package bus

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// SchemaVersion is the contract this package implements. Its messages carry
// SchemaVersionJSON or SchemaVersionProtobuf, the version of their form.
const SchemaVersion = 2

// Kind names what a message's payload is.
type Kind string

// The kinds of v1.
const (
	KindPodUpdate        Kind = "PodUpdate"
	KindPodRuntimeStatus Kind = "PodRuntimeStatus"
	KindProbeResult      Kind = "ProbeResult"
	KindSourcesReady     Kind = "SourcesReady"
	KindAgentReadiness   Kind = "AgentReadiness"
	KindLogsRequest      Kind = "LogsRequest"
	KindLogsChunk        Kind = "LogsChunk"
	KindExecRequest      Kind = "ExecRequest"
	KindExecResult       Kind = "ExecResult"
	KindStatsRequest     Kind = "StatsRequest"
	KindStatsResult      Kind = "StatsResult"
	KindStreamRequest    Kind = "StreamRequest"
	KindStreamResult     Kind = "StreamResult"
	KindStaticPods       Kind = "StaticPods"
	// KindStatusPatch is what a shadow statussync would have written
	// (docs/bus.md, "Shadow stages").
	KindStatusPatch Kind = "StatusPatch"
	// KindShadowEvent is an Event a shadow pod worker would have recorded
	// (docs/bus.md, "Shadow stages").
	KindShadowEvent Kind = "ShadowEvent"
	// KindNodePressure, KindEvictRequest and KindEvictResult carry
	// node-pressure eviction.
	KindNodePressure Kind = "NodePressure"
	KindEvictRequest Kind = "EvictRequest"
	KindEvictResult  Kind = "EvictResult"
	// KindReclaimRequest and KindReclaimResult carry node-level reclaim
	// before eviction.
	KindReclaimRequest Kind = "ReclaimRequest"
	KindReclaimResult  Kind = "ReclaimResult"
)

var knownKinds = map[Kind]bool{
	KindPodUpdate: true, KindPodRuntimeStatus: true, KindProbeResult: true,
	KindSourcesReady: true, KindAgentReadiness: true,
	KindLogsRequest: true, KindLogsChunk: true, KindExecRequest: true, KindExecResult: true,
	KindStatsRequest: true, KindStatsResult: true,
	KindStreamRequest: true, KindStreamResult: true,
	KindStaticPods: true, KindStatusPatch: true, KindShadowEvent: true, KindNodePressure: true, KindEvictRequest: true, KindEvictResult: true,
	KindReclaimRequest: true, KindReclaimResult: true,
	KindDeviceAllocateRequest: true, KindDeviceAllocateResult: true,
}

// Op is the operation of a PodUpdate, as the kubelet's config package names them.
type Op string

// The PodUpdate operations (kubelet pkg/kubelet/types: PodOperation).
const (
	// OpSet carries the full set of pods of a source (in one partition).
	OpSet Op = "SET"
	// OpAdd carries pods new to the source.
	OpAdd Op = "ADD"
	// OpUpdate carries pods whose spec, labels or annotations changed.
	OpUpdate Op = "UPDATE"
	// OpDelete carries pods gracefully deleted (deletionTimestamp set).
	OpDelete Op = "DELETE"
	// OpRemove carries pods gone from the source.
	OpRemove Op = "REMOVE"
	// OpReconcile carries pods whose status alone changed.
	OpReconcile Op = "RECONCILE"
	// OpSetPart carries one part of a SET too large for one message (the
	// server's max_payload); the parts together are the SET (Snapshots).
	OpSetPart Op = "SETPART"
)

var knownOps = map[Op]bool{OpSet: true, OpAdd: true, OpUpdate: true, OpDelete: true, OpRemove: true, OpReconcile: true, OpSetPart: true}

// Envelope is the outer form of every message on the bus.
type Envelope struct {
	// SchemaVersion is the version of the message's form: 1 for JSON, 2 for
	// protobuf.
	SchemaVersion int    `json:"schemaVersion"`
	Kind          Kind   `json:"kind"`
	Node          string `json:"node"`
	// Source names the publisher: a pod source (api, file, http) for pod
	// updates, a stage instance otherwise.
	Source string `json:"source"`
	// Op is set on PodUpdate messages only.
	Op Op `json:"op,omitempty"`
	// Seq increases with every message of one source; receivers drop a
	// message whose Seq is not above the last one seen from that source on
	// that subject.
	Seq    uint64    `json:"seq"`
	SentAt time.Time `json:"sentAt"`
	// Payload is the kind's payload in the message's encoding: a JSON object,
	// or the kind's protobuf message.
	Payload json.RawMessage `json:"payload"`
	// Encoding is the message's wire form (the Content-Type header), not a
	// field of it.
	Encoding Encoding `json:"-"`
}

// FieldError is a decoding error that names the offending field by its JSON
// path, such as "payload.pods[0].metadata.uid".
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return fmt.Sprintf("bus: field %s: %s", e.Field, e.Reason) }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// NewEnvelope wraps a payload as JSON. Seq and SentAt are left to the
// publisher.
func NewEnvelope(kind Kind, node, source string, op Op, payload any) (*Envelope, error) {
	return NewEnvelopeAs(EncodingJSON, kind, node, source, op, payload)
}

// NewEnvelopeAs wraps a payload in the given encoding. A kind without a
// protobuf form is wrapped as JSON whatever enc says.
func NewEnvelopeAs(enc Encoding, kind Kind, node, source string, op Op, payload any) (*Envelope, error) {
	e := &Envelope{SchemaVersion: SchemaVersionJSON, Kind: kind, Node: node, Source: source, Op: op, Encoding: EncodingJSON}
	var err error
	if pp, ok := protoForm(payload); ok && enc == EncodingProtobuf {
		e.SchemaVersion, e.Encoding = SchemaVersionProtobuf, EncodingProtobuf
		e.Payload, err = pp.appendProto(nil)
	} else {
		e.Payload, err = json.Marshal(payload)
	}
	if err != nil {
		return nil, fmt.Errorf("bus: encode %s payload: %w", kind, err)
	}
	return e, nil
}

// protoForm is the payload as a protoPayload when its kind has a
// protobuf form, whether it came as a pointer or as a value.
func protoForm(payload any) (protoPayload, bool) {
	switch v := payload.(type) {
	case protoPayload:
		return v, true
	case PodUpdate:
		return &v, true
	case PodRuntimeStatus:
		return &v, true
	case ProbeResult:
		return &v, true
	}
	return nil, false
}

// Encode returns the wire form of the envelope, in its Encoding, after
// checking it as Decode would.
func Encode(e *Envelope) ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	if e.Encoding == EncodingProtobuf {
		return marshalProtoEnvelope(e), nil
	}
	return json.Marshal(e)
}

// Decode parses and checks a message whose encoding is not named: a JSON
// message begins with '{', a protobuf one never does (its first byte is a
// field tag). It never panics; every error names the field.
func Decode(data []byte) (*Envelope, error) {
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
		return decodeAs(EncodingJSON, data)
	}
	return decodeAs(EncodingProtobuf, data)
}

// DecodeMsg parses and checks a message in the encoding its Content-Type
// header names; a message without the header is decoded as Decode does.
func DecodeMsg(header map[string][]string, data []byte) (*Envelope, error) {
	ct := ""
	if v := header[HeaderContentType]; len(v) > 0 {
		ct = v[0]
	}
	if ct == "" {
		return Decode(data)
	}
	enc, ok := encodingOf(ct)
	if !ok {
		return nil, fieldErr("(header "+HeaderContentType+")", "unknown content type %q", ct)
	}
	return decodeAs(enc, data)
}

func decodeAs(enc Encoding, data []byte) (*Envelope, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fieldErr("(message)", "empty")
	}
	var e *Envelope
	if enc == EncodingProtobuf {
		var err error
		if e, err = unmarshalProtoEnvelope(data); err != nil {
			return nil, err
		}
	} else {
		e = &Envelope{}
		if err := json.Unmarshal(data, e); err != nil {
			return nil, jsonFieldError("", err)
		}
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return e, nil
}

// Validate checks the envelope fields (not the payload's inside).
func (e *Envelope) Validate() error {
	want := SchemaVersionJSON
	if e.Encoding == EncodingProtobuf {
		want = SchemaVersionProtobuf
	}
	switch {
	case e.SchemaVersion != want:
		return fieldErr("schemaVersion", "is %d, want %d for %s", e.SchemaVersion, want, e.Encoding)
	case !knownKinds[e.Kind]:
		return fieldErr("kind", "unknown kind %q", e.Kind)
	case e.Node == "":
		return fieldErr("node", "required")
	case e.Source == "":
		return fieldErr("source", "required")
	case e.Kind == KindPodUpdate && !knownOps[e.Op]:
		return fieldErr("op", "unknown PodUpdate op %q", e.Op)
	case e.Kind != KindPodUpdate && e.Op != "":
		return fieldErr("op", "only PodUpdate messages carry an op, %s has %q", e.Kind, e.Op)
	case e.Seq == 0:
		return fieldErr("seq", "required (starts at 1)")
	case e.SentAt.IsZero():
		return fieldErr("sentAt", "required")
	}
	if e.Encoding == EncodingProtobuf {
		return nil
	}
	p := bytes.TrimSpace(e.Payload)
	if len(p) == 0 || p[0] != '{' {
		return fieldErr("payload", "must be a JSON object")
	}
	return nil
}

// jsonFieldError turns encoding/json's errors into FieldErrors.
func jsonFieldError(prefix string, err error) error {
	var ute *json.UnmarshalTypeError
	if errors.As(err, &ute) {
		f := ute.Field
		if f == "" {
			f = "(root)"
		}
		if prefix != "" {
			f = prefix + "." + f
		}
		return fieldErr(f, "cannot hold a JSON %s", ute.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		f := prefix
		if f == "" {
			f = "(message)"
		}
		return fieldErr(f, "malformed JSON at offset %d: %v", se.Offset, err)
	}
	f := prefix
	if f == "" {
		f = "(message)"
	}
	return fieldErr(f, "%v", err)
}

// DecodePayload decodes the payload of an envelope of the given kind into v
// and checks it when v has a Validate method.
func DecodePayload[T any, P interface {
	*T
	validator
}](e *Envelope, want Kind) (*T, error) {
	return decodePayload[T, P](e, want, nil)
}

// decodePayload is DecodePayload with a protobuf payload read by unmarshal
// (nil: the kind's own unmarshalProto).
func decodePayload[T any, P interface {
	*T
	validator
}](e *Envelope, want Kind, unmarshal func(P, []byte) error) (*T, error) {
	if e.Kind != want {
		return nil, fieldErr("kind", "is %s, want %s", e.Kind, want)
	}
	var v T
	if e.Encoding == EncodingProtobuf {
		if unmarshal == nil {
			pp, ok := any(P(&v)).(protoPayload)
			if !ok {
				return nil, fieldErr("payload", "%s has no protobuf form", want)
			}
			unmarshal = func(_ P, b []byte) error { return pp.unmarshalProto(b) }
		}
		if err := unmarshal(P(&v), e.Payload); err != nil {
			return nil, err
		}
	} else if err := json.Unmarshal(e.Payload, &v); err != nil {
		return nil, jsonFieldError("payload", err)
	}
	if err := P(&v).validate(e); err != nil {
		return nil, err
	}
	return &v, nil
}

type validator interface {
	validate(e *Envelope) error
}
