package bus_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/splitlet/splitlet/libs/bus"
)

// docExamples returns the example messages of docs/bus.md (its ```json blocks).
func docExamples(t testing.TB) [][]byte {
	data, err := os.ReadFile("../../docs/bus.md")
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, m := range regexp.MustCompile("(?s)```json\n(.*?)```").FindAllSubmatch(data, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestDocExamplesDecode keeps docs/bus.md honest: every example message in
// it decodes, payload included.
func TestDocExamplesDecode(t *testing.T) {
	ex := docExamples(t)
	if len(ex) < 8 {
		t.Fatalf("docs/bus.md has %d examples, want one per kind", len(ex))
	}
	kinds := map[bus.Kind]bool{}
	for i, data := range ex {
		e, err := bus.Decode(data)
		if err != nil {
			t.Fatalf("example %d: %v\n%s", i, err, data)
		}
		if err := decodeAny(e); err != nil {
			t.Fatalf("example %d payload: %v\n%s", i, err, data)
		}
		kinds[e.Kind] = true
	}
	for _, k := range []bus.Kind{bus.KindPodUpdate, bus.KindPodRuntimeStatus, bus.KindProbeResult, bus.KindSourcesReady,
		bus.KindAgentReadiness, bus.KindLogsRequest, bus.KindLogsChunk, bus.KindExecRequest, bus.KindExecResult,
		bus.KindStreamRequest, bus.KindStreamResult} {
		if !kinds[k] {
			t.Errorf("docs/bus.md has no example of %s", k)
		}
	}
}

func decodeAny(e *bus.Envelope) error {
	var err error
	switch e.Kind {
	case bus.KindPodUpdate:
		_, err = bus.DecodePodUpdate(e)
	case bus.KindPodRuntimeStatus:
		_, err = bus.DecodePodRuntimeStatus(e)
	case bus.KindProbeResult:
		_, err = bus.DecodeProbeResult(e)
	case bus.KindSourcesReady:
		_, err = bus.DecodeSourcesReady(e)
	case bus.KindAgentReadiness:
		_, err = bus.DecodeAgentReadiness(e)
	case bus.KindLogsRequest:
		_, err = bus.DecodeLogsRequest(e)
	case bus.KindLogsChunk:
		_, err = bus.DecodeLogsChunk(e)
	case bus.KindExecRequest:
		_, err = bus.DecodeExecRequest(e)
	case bus.KindExecResult:
		_, err = bus.DecodeExecResult(e)
	case bus.KindStatsRequest:
		_, err = bus.DecodeStatsRequest(e)
	case bus.KindStreamRequest:
		_, err = bus.DecodeStreamRequest(e)
	case bus.KindStreamResult:
		_, err = bus.DecodeStreamResult(e)
	case bus.KindStatsResult:
		_, err = bus.DecodeStatsResult(e)
	}
	return err
}

// FuzzDecode: whatever arrives, in JSON or protobuf, Decode and the payload
// decoders return an error or a message, never a panic; and what decodes
// encodes and decodes again to the same envelope.
func FuzzDecode(f *testing.F) {
	for _, ex := range docExamples(f) {
		f.Add(ex)
		// and the example in protobuf, where its kind has that form.
		if e, err := bus.Decode(ex); err == nil {
			if v := decodedPayload(f, e); v != nil {
				f.Add(reencode(f, bus.EncodingProtobuf, e, v))
			}
		}
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"schemaVersion":1,"kind":"PodUpdate","payload":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := bus.Decode(data)
		if err != nil {
			return
		}
		_ = decodeAny(e)
		again, err := bus.Encode(e)
		if err != nil {
			t.Fatalf("decoded envelope does not encode: %v", err)
		}
		e2, err := bus.Decode(again)
		if err != nil {
			t.Fatalf("re-encoded envelope does not decode: %v", err)
		}
		if e2.Kind != e.Kind || e2.Encoding != e.Encoding || e2.Seq != e.Seq || e2.Source != e.Source || e2.Op != e.Op || !e2.SentAt.Equal(e.SentAt) {
			t.Fatalf("round trip changed the envelope: %+v vs %+v", e, e2)
		}
	})
}
