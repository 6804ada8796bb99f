package notify

import (
	"bytes"
	"encoding/json"
	"errors"
)

// errNotLoaded is a 200 answer whose report says the pod did not load the content.
var errNotLoaded = errors.New(`HTTP 200 with {"loaded":false}: the pod could not load the content`)

// loadedReport reads the start of a 200 answer: a runtime that reports whether it loaded the
// content puts "loaded" first ({"loaded":false,…}); an answer without that report (the
// published Deno runtime answers a bare 200) counts as loaded. Only the first member is read,
// so an answer cut at MaxExcerptBytes is still understood.
func loadedReport(start []byte) error {
	dec := json.NewDecoder(bytes.NewReader(start))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil //nolint:nilerr // an answer that is not a report counts as loaded
	}
	if key, err := dec.Token(); err != nil || key != "loaded" {
		return nil //nolint:nilerr // an answer that is not a report counts as loaded
	}
	if v, err := dec.Token(); err == nil && v == false {
		return permanentError{errNotLoaded}
	}
	return nil
}
