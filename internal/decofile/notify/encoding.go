package notify

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/andybalholm/brotli"
)

// Coding is a content coding of the push body (RFC 9110 §8.4.1).
type Coding uint8

// Codings the notifier can send. A pod gets a compressed body only when it said it accepts one.
const (
	// Identity is the plain JSON body, which every runtime accepts (the published Deno runtime
	// accepts nothing else).
	Identity Coding = 0
	// Brotli is "br", preferred when a pod accepts it: it is the smaller.
	Brotli Coding = 1 << 0
	// Gzip is "gzip".
	Gzip Coding = 1 << 1
)

// compressed lists the compressed codings, preferred first.
var compressed = [...]Coding{Brotli, Gzip}

// String is the coding's Content-Encoding token.
func (c Coding) String() string {
	switch c {
	case Identity:
		return "identity"
	case Brotli:
		return "br"
	case Gzip:
		return "gzip"
	}
	return fmt.Sprintf("coding(%d)", uint8(c))
}

// maxAcceptEncoding bounds the part of a pod's Accept-Encoding value (header or annotation) that
// is read: the value is the tenant's, and a few tokens is all a real runtime sends.
const maxAcceptEncoding = 256

// ParseAcceptEncoding returns the compressed codings an Accept-Encoding value (RFC 9110 §12.5.3;
// as a response header it lists what the server accepts in requests, RFC 7694) accepts: "br"
// and "gzip" tokens (case-insensitive, with any parameters), except those with q=0. Unknown
// tokens, "*" and "identity" add nothing: only what a runtime names is sent to it.
func ParseAcceptEncoding(v string) Coding {
	v = v[:min(len(v), maxAcceptEncoding)]
	var set Coding
	for item := range strings.SplitSeq(v, ",") {
		name, params, _ := strings.Cut(item, ";")
		var c Coding
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "br":
			c = Brotli
		case "gzip", "x-gzip":
			c = Gzip
		default:
			continue
		}
		if zeroQuality(params) {
			continue
		}
		set |= c
	}
	return set
}

// zeroQuality reports whether parameters ";q=0" (or 0.0…) mark a coding as not acceptable.
func zeroQuality(params string) bool {
	for p := range strings.SplitSeq(params, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "q") {
			continue
		}
		q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		return err != nil || q <= 0
	}
	return false
}

// preferred is the best coding of set, or Identity.
func preferred(set Coding) Coding {
	for _, c := range compressed {
		if set&c != 0 {
			return c
		}
	}
	return Identity
}

// Wire levels: the push body is compressed once per publish and sent to every pod, so a strong
// setting pays for itself many times over. Brotli quality 9, window 22 is the stored form's
// first level too: within 1.2× of quality 11's size for 0.16–0.29 s of CPU on the standard 4.2 MB
// site (encode.BenchmarkDefaultLevel); a larger window is slower and no smaller below quality 10.
var (
	// WireBrotli is the brotli setting of a "br" push body.
	WireBrotli = brotli.WriterOptions{Quality: 9, LGWin: 22}
	// WireGzip is the gzip level of a "gzip" push body.
	WireGzip = gzip.DefaultCompression
)

// minCompressBytes is the body size below which compressing saves less than it costs.
const minCompressBytes = 1 << 10

// encodeBody compresses body with c.
func encodeBody(body []byte, c Coding) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(len(body) / 8)
	var err error
	switch c {
	case Brotli:
		w := brotli.NewWriterOptions(&buf, WireBrotli)
		if _, err = w.Write(body); err == nil {
			err = w.Close()
		}
	case Gzip:
		var w *gzip.Writer
		if w, err = gzip.NewWriterLevel(&buf, WireGzip); err == nil {
			if _, err = w.Write(body); err == nil {
				err = w.Close()
			}
		}
	default:
		return nil, fmt.Errorf("cannot encode a push body as %s", c)
	}
	if err != nil {
		return nil, fmt.Errorf("compress the push body as %s: %w", c, err)
	}
	return buf.Bytes(), nil
}

// payload is one Run's push body with the compressed forms of the same bytes, which every pod
// of the Run, and every Run of the same body (the steps of one publish), share.
type payload struct {
	plain []byte
	forms *forms
}

// forms are the compressed forms of one body, each made at most once and only when a pod
// accepts it. They do not hold the body: once no Run sends it, only the compressed bytes stay
// cached, within maxCachedBytes.
type forms struct {
	owner *payloads
	key   [sha256.Size]byte
	coded [len(compressed)]struct {
		once sync.Once
		data []byte
		err  error
	}
}

// errNotSmaller is a compressed form no smaller than the body: the body is sent as it is.
var errNotSmaller = fmt.Errorf("the compressed body is not smaller than the plain one")

func (p *payload) body(c Coding) ([]byte, error) {
	if c == Identity {
		return p.plain, nil
	}
	for i, cc := range compressed {
		if cc == c {
			f := &p.forms.coded[i]
			f.once.Do(func() {
				f.data, f.err = encodeBody(p.plain, c)
				if f.err == nil && len(f.data) >= len(p.plain) {
					f.data, f.err = nil, errNotSmaller
				}
				p.forms.owner.grew(p.forms, len(f.data))
			})
			return f.data, f.err
		}
	}
	return nil, fmt.Errorf("cannot encode a push body as %s", c)
}

// Bounds of the cache of compressed forms: how many recent bodies keep them, and how many bytes
// they may hold together (the oldest go first).
const (
	payloadCacheSize = 8
	maxCachedBytes   = 32 << 20
)

// payloads finds the compressed forms of a body by its SHA-256, keeping those of the most recent
// few bodies.
type payloads struct {
	mu    sync.Mutex
	items []*forms // most recent last
	sizes map[*forms]int
	total int
}

func (ps *payloads) get(body []byte) *payload {
	key := sha256.Sum256(body)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for i, f := range ps.items {
		if f.key == key {
			ps.items = append(append(ps.items[:i:i], ps.items[i+1:]...), f)
			return &payload{plain: body, forms: f}
		}
	}
	f := &forms{owner: ps, key: key}
	ps.items = append(ps.items, f)
	ps.evict()
	return &payload{plain: body, forms: f}
}

// grew records n more cached bytes for f.
func (ps *payloads) grew(f *forms, n int) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if !slices.Contains(ps.items, f) {
		return // evicted meanwhile: only its Runs hold it
	}
	if ps.sizes == nil {
		ps.sizes = map[*forms]int{}
	}
	ps.sizes[f] += n
	ps.total += n
	ps.evict()
}

// evict drops the oldest entries past the count or byte bound; a Run using one keeps its own
// reference until it ends.
func (ps *payloads) evict() {
	for len(ps.items) > payloadCacheSize || (ps.total > maxCachedBytes && len(ps.items) > 1) {
		old := ps.items[0]
		ps.items = ps.items[1:]
		ps.total -= ps.sizes[old]
		delete(ps.sizes, old)
	}
}

// podCodings remembers, per pod UID, what each pod said about compressed bodies: the codings
// its last answer advertised (Accept-Encoding) and the ones it refused (415). It holds two
// generations of at most maxPodEntries each, so pods that are gone are forgotten.
type podCodings struct {
	mu        sync.Mutex
	cur, prev map[string]podCoding
}

type podCoding struct {
	// advertised is the set the pod's last answer listed in Accept-Encoding.
	advertised Coding
	// refused are codings the pod answered 415 to; never sent to it again.
	refused Coding
}

// maxPodEntries bounds one generation of podCodings.
const maxPodEntries = 1 << 16

func (pc *podCodings) load(uid string) (podCoding, bool) {
	if v, ok := pc.cur[uid]; ok {
		return v, true
	}
	v, ok := pc.prev[uid]
	return v, ok
}

func (pc *podCodings) store(uid string, v podCoding) {
	if pc.cur == nil {
		pc.cur = map[string]podCoding{}
	}
	if _, ok := pc.cur[uid]; !ok && len(pc.cur) >= maxPodEntries {
		pc.prev, pc.cur = pc.cur, map[string]podCoding{}
	}
	pc.cur[uid] = v
}

// choose is the coding to send pod: one it advertised on an earlier answer, else one its
// annotation names, never one it refused; Identity when nothing is known.
func (pc *podCodings) choose(pod Pod) Coding {
	set := ParseAcceptEncoding(pod.AcceptEncoding)
	if pod.UID != "" {
		pc.mu.Lock()
		v, ok := pc.load(pod.UID)
		pc.mu.Unlock()
		if ok {
			if v.advertised != 0 {
				set = v.advertised
			}
			set &^= v.refused
		}
	}
	return preferred(set)
}

// learn records what a pod's answer says: the codings its Accept-Encoding header lists (an
// answer without the header forgets the earlier list: the runtime may have been replaced in
// place), and that it refused sent when it answered 415 to it.
func (pc *podCodings) learn(uid string, header []string, sent Coding, refused bool) {
	if uid == "" {
		return
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	v, _ := pc.load(uid)
	v.advertised = 0
	if len(header) > 0 {
		v.advertised = ParseAcceptEncoding(strings.Join(header, ","))
	}
	if refused {
		v.refused |= sent
	}
	if v == (podCoding{}) {
		delete(pc.cur, uid)
		delete(pc.prev, uid)
		return
	}
	pc.store(uid, v)
}
