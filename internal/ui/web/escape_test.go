package web

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	mirrorv1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/scheme"
	"github.com/siteops/siteops/internal/ui/access"
)

// allowAll answers every check yes: this test is about rendering, not rights.
type allowAll struct{}

func (allowAll) Review(context.Context, access.Person, access.Check) (bool, error) { return true, nil }

// commits is a fixed commit log.
type commits []Commit

func (c commits) Recent(string, string, int) []Commit { return c }

// pending is a fixed pending-changes log.
type pending []Pending

func (p pending) Pending(string, string, int) []Pending { return p }

// person authenticates every request as one person.
type person access.Person

func (p person) Authenticate(*http.Request) (access.Person, error) { return access.Person(p), nil }

// TestMirrorTextRendersAsText: a commit message and author, a pending change's file, and a
// GitTarget's condition message can carry text a tenant wrote (a CommitRequest's message, an
// object's name in a path, a remote's error): the page shows them as text, never as markup.
func TestMirrorTextRendersAsText(t *testing.T) {
	const markup = `<script>alert(1)</script><img src=x onerror=alert(2)>`
	target := &mirrorv1.GitTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "main"},
		Status: mirrorv1.GitTargetStatus{Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "PushFailed", Message: markup}}}}
	objects := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(target).Build()
	s, err := New(Backend{Objects: objects, Access: access.NewAuthorizer(allowAll{}, 0),
		Commits: commits{{Hash: "0123456789abcdef", Author: markup, Message: markup, Time: time.Now()}},
		Pending: pending{{Path: markup, Operation: "write", Arrived: time.Now()}}},
		Options{Authenticator: person{User: "admin"}})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/namespaces/shop/gittargets/main", nil))
	page := w.Body.String()
	if w.Code != http.StatusOK {
		t.Fatalf("HTTP %d:\n%s", w.Code, page)
	}
	if strings.Contains(page, "<script>alert") || strings.Contains(page, "<img src=x") {
		t.Errorf("tenant text reached the page as markup:\n%s", page)
	}
	if n := strings.Count(page, "&lt;script&gt;alert(1)&lt;/script&gt;"); n < 4 {
		t.Errorf("the text shows escaped %d times, want at least 4 (author, message, path, condition):\n%s", n, page)
	}
	if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("Content-Security-Policy %q: want scripts from the UI's own origin only", csp)
	}
}
