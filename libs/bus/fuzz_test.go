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
		bus.KindStreamRequest, bus.KindStreamResult, bus.KindStaticPods} {
		if !kinds[k] {
			t.Errorf("docs/bus.md has no example of %s", k)
		}
	}
}

// decodeKind decodes an envelope's payload, whatever its kind.
func decodeKind(e *bus.Envelope) (any, error) {
	switch e.Kind {
	case bus.KindPodUpdate:
		return bus.DecodePodUpdate(e)
	case bus.KindPodRuntimeStatus:
		return bus.DecodePodRuntimeStatus(e)
	case bus.KindProbeResult:
		return bus.DecodeProbeResult(e)
	case bus.KindSourcesReady:
		return bus.DecodeSourcesReady(e)
	case bus.KindAgentReadiness:
		return bus.DecodeAgentReadiness(e)
	case bus.KindLogsRequest:
		return bus.DecodeLogsRequest(e)
	case bus.KindLogsChunk:
		return bus.DecodeLogsChunk(e)
	case bus.KindExecRequest:
		return bus.DecodeExecRequest(e)
	case bus.KindExecResult:
		return bus.DecodeExecResult(e)
	case bus.KindStatsRequest:
		return bus.DecodeStatsRequest(e)
	case bus.KindStreamRequest:
		return bus.DecodeStreamRequest(e)
	case bus.KindStreamResult:
		return bus.DecodeStreamResult(e)
	case bus.KindStatsResult:
		return bus.DecodeStatsResult(e)
	case bus.KindStaticPods:
		return bus.DecodeStaticPods(e)
	case bus.KindNodePressure:
		return bus.DecodeNodePressure(e)
	case bus.KindEvictRequest:
		return bus.DecodeEvictRequest(e)
	case bus.KindEvictResult:
		return bus.DecodeEvictResult(e)
	case bus.KindReclaimRequest:
		return bus.DecodeReclaimRequest(e)
	case bus.KindReclaimResult:
		return bus.DecodeReclaimResult(e)
	case bus.KindDeviceAllocateRequest:
		return bus.DecodeDeviceAllocateRequest(e)
	case bus.KindDeviceAllocateResult:
		return bus.DecodeDeviceAllocateResult(e)
	}
	return nil, nil
}

func decodeAny(e *bus.Envelope) error {
	_, err := decodeKind(e)
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
