package notify

import (
	"bytes"
	"crypto/rand"
	"testing"
)

// The compressed form of a body is made once and shared by every Run that sends the same body.
func TestPayloadIsCompressedOnce(t *testing.T) {
	var ps payloads
	body := bytes.Repeat([]byte(`{"a":"some text that compresses"}`), 1000)
	first, err := ps.get(body).body(Brotli)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ps.get(bytes.Clone(body)).body(Brotli)
	if err != nil {
		t.Fatal(err)
	}
	if &first[0] != &again[0] {
		t.Fatal("the same body was compressed twice")
	}
	for i := range payloadCacheSize {
		ps.get([]byte{byte(i)})
	}
	if len(ps.items) != payloadCacheSize {
		t.Fatalf("cache holds %d bodies, want at most %d", len(ps.items), payloadCacheSize)
	}
}

// The cache keeps no plain body, and compressed forms only within maxCachedBytes: incompressible
// bodies are sent plain and leave nothing behind.
func TestPayloadCacheIsBounded(t *testing.T) {
	var ps payloads
	random := make([]byte, 1<<20)
	_, _ = rand.Read(random)
	p := ps.get(random)
	if _, err := p.body(Gzip); err == nil {
		t.Fatal("an incompressible body got a compressed form")
	}
	if ps.total != 0 {
		t.Fatalf("cache holds %d bytes for an incompressible body", ps.total)
	}
	for i := range payloadCacheSize {
		body := bytes.Repeat([]byte{byte('a' + i)}, 1<<20)
		if _, err := ps.get(body).body(Brotli); err != nil {
			t.Fatal(err)
		}
	}
	if ps.total > maxCachedBytes || len(ps.items) > payloadCacheSize {
		t.Fatalf("cache holds %d bytes in %d entries", ps.total, len(ps.items))
	}
}

// The per-pod memory is bounded: beyond maxPodEntries pods, the oldest generation is dropped.
func TestPodCodingsAreBounded(t *testing.T) {
	var pc podCodings
	for i := range 2*maxPodEntries + 10 {
		pc.learn(string(rune(i+1))+"uid", []string{"br"}, Identity, false)
	}
	if n := len(pc.cur) + len(pc.prev); n > 2*maxPodEntries {
		t.Fatalf("remembers %d pods, want at most %d", n, 2*maxPodEntries)
	}
	if c := pc.choose(Pod{UID: string(rune(2*maxPodEntries+10)) + "uid"}); c != Brotli {
		t.Fatalf("the latest pod is not remembered: %v", c)
	}
}
