package testenv

import (
	"strings"
	"sync"
)

// Warnings collects the warnings the API server returns to one client (set it as the
// rest.Config's WarningHandler).
type Warnings struct {
	mu   sync.Mutex
	text []string
}

// HandleWarningHeader records one warning.
func (w *Warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.text = append(w.text, text)
}

// All is every warning so far, one a line.
func (w *Warnings) All() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.text, "\n")
}
