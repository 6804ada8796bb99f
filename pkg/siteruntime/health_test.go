package siteruntime

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestContentThatFailsToLoad: content whose blocks cannot be resolved is answered 422 with
// {"loaded":false} and the runtime keeps serving what it had; good content reports loaded.
func TestContentThatFailsToLoad(t *testing.T) {
	rt, err := New(context.Background(), Options{Token: token, Validate: func(b []byte) error {
		if strings.Contains(string(b), `"forbidden"`) {
			return errors.New("the site refuses this block")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	h := rt.Handler()
	good := `{"timestamp":"100","decofile":{"home":{"__resolveType":"website/pages/Page.tsx","sections":[{"__resolveType":"site/sections/Hero.tsx"}]}}}`
	rec := push(t, h, "Token "+token, good)
	var reply reloadReply
	if err := json.Unmarshal(rec.Body.Bytes(), &reply); err != nil || rec.Code != http.StatusOK || !reply.Loaded || !reply.Applied || reply.ContentHash != rt.Current().Hash {
		t.Fatalf("good content: %d %s", rec.Code, rec.Body)
	}
	if !strings.HasPrefix(rec.Body.String(), `{"loaded":true`) {
		t.Fatalf("the loaded report is not at the start of the answer: %s", rec.Body)
	}
	served := rt.Current()
	for _, bad := range []string{
		`{"timestamp":"101","decofile":{"home":{"__resolveType":""}}}`,
		`{"timestamp":"101","decofile":{"home":{"sections":[{"__resolveType":42}]}}}`,
		`{"timestamp":"101","decofile":{"home":{"forbidden":true}}}`,
	} {
		rec := push(t, h, "Token "+token, bad)
		var reply reloadReply
		if err := json.Unmarshal(rec.Body.Bytes(), &reply); err != nil || rec.Code != http.StatusUnprocessableEntity || reply.Loaded {
			t.Fatalf("%s: %d %s", bad, rec.Code, rec.Body)
		}
		if rt.Current() != served {
			t.Fatalf("%s replaced the served content", bad)
		}
	}

	req := httptest.NewRequest(http.MethodGet, HealthPath, nil)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var health Health
	if err := json.Unmarshal(rec.Body.Bytes(), &health); err != nil || rec.Code != http.StatusOK || health.Status != "ok" || health.ContentHash != served.Hash || health.Timestamp != 100 {
		t.Fatalf("health: %d %s", rec.Code, rec.Body)
	}
}

func TestHealthReportsProblems(t *testing.T) {
	rt, err := New(context.Background(), Options{Healthy: func() error { return errors.New("database unreachable") }})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	rt.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, HealthPath, nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "database unreachable") {
		t.Fatalf("health: %d %s", rec.Code, rec.Body)
	}
}
