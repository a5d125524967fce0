package capped

import (
	"bytes"
	"testing"
)

func TestKeepsTheFirstLimitBytes(t *testing.T) {
	var b Buffer
	chunk := bytes.Repeat([]byte("x"), Limit/2+1)
	for i := 0; i < 3; i++ {
		if n, err := b.Write(chunk); n != len(chunk) || err != nil {
			t.Fatalf("write %d: %d, %v", i, n, err)
		}
	}
	if got := len(b.Bytes()); got != Limit {
		t.Fatalf("kept %d bytes, want %d", got, Limit)
	}
}
