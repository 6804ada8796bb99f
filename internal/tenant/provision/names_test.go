package provision

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/tenant/acl"
)

func TestUsernameAndSibling(t *testing.T) {
	for ns, user := range map[string]string{"sites-loja": "loja", "loja": "loja", "sites-sites-x": "sites-x", "mysites-a": "mysites-a"} {
		if got := Username(ns); got != user {
			t.Errorf("Username(%q) = %q, want %q", ns, got, user)
		}
	}
	if Sibling("sites-foo") != "foo" || Sibling("foo") != "sites-foo" {
		t.Error("Sibling does not map foo and sites-foo onto each other")
	}
}

func TestNamespacesFor(t *testing.T) {
	if got := NamespacesFor("foo"); len(got) != 2 || got[0] != "foo" || got[1] != "sites-foo" {
		t.Errorf("NamespacesFor(foo) = %v", got)
	}
	if got := NamespacesFor("sites-foo"); len(got) != 1 || got[0] != "sites-sites-foo" {
		t.Errorf("NamespacesFor(sites-foo) = %v: namespace sites-foo maps to foo, not sites-foo", got)
	}
}

func TestReserved(t *testing.T) {
	for _, u := range []string{"", "default", "lock", "operator"} {
		if !Reserved(u, "operator") {
			t.Errorf("%q not reserved", u)
		}
	}
	if Reserved("loja", "") {
		t.Error("ordinary name reserved")
	}
}

func TestOwnerPrefersProvisionedThenOldest(t *testing.T) {
	old := metav1.NewTime(time.Unix(100, 0))
	young := metav1.NewTime(time.Unix(200, 0))
	a := corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "foo", CreationTimestamp: young}}
	b := corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sites-foo", CreationTimestamp: old}}
	if got := Owner([]corev1.Namespace{a, b}); got != "sites-foo" {
		t.Errorf("oldest should own, got %q", got)
	}
	a.Finalizers = []string{Finalizer}
	if got := Owner([]corev1.Namespace{b, a}); got != "foo" {
		t.Errorf("provisioned namespace should keep the user, got %q", got)
	}
	b.CreationTimestamp, a.Finalizers = young, nil
	if got := Owner([]corev1.Namespace{b, a}); got != "foo" {
		t.Errorf("tie should go by name, got %q", got)
	}
	if Owner(nil) != "" {
		t.Error("owner of nothing")
	}
}

func TestCredentialsFrom(t *testing.T) {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationRetiring: "h1, h2,"}},
		Data:       map[string][]byte{decov1.ValkeyACLUsernameKey: []byte("loja"), decov1.ValkeyACLPasswordKey: []byte("p")},
	}
	u, ok := CredentialsFrom(s, "loja")
	if !ok || u.Password != "p" || len(u.RetiredHashes) != 2 || u.RetiredHashes[1] != "h2" {
		t.Fatalf("CredentialsFrom = %+v %v", u, ok)
	}
	if _, ok := CredentialsFrom(s, "other"); ok {
		t.Error("Secret for another user accepted")
	}
	s.Data[decov1.ValkeyACLPasswordKey] = nil
	if _, ok := CredentialsFrom(s, "loja"); ok {
		t.Error("Secret without password accepted")
	}
	if _, ok := CredentialsFrom(nil, "loja"); ok {
		t.Error("missing Secret accepted")
	}
}

func TestRevisionChangesOnlyWithPassword(t *testing.T) {
	a := Revision(acl.User{Name: "u", Password: "p"})
	if a != Revision(acl.User{Name: "u", Password: "p", RetiredHashes: []string{"x"}}) {
		t.Error("retired passwords changed the revision: a rotation's second step would restart pods again")
	}
	if a == Revision(acl.User{Name: "u", Password: "q"}) {
		t.Error("a new password kept the revision: pods would not restart")
	}
}

func TestDeleteDeadline(t *testing.T) {
	now := time.Now()
	ns := &corev1.Namespace{}
	if got := deleteDeadline(ns, now, time.Minute); !got.Equal(now.Add(time.Minute)) {
		t.Errorf("opt-out deadline %v", got)
	}
	del := metav1.NewTime(now.Add(-50 * time.Second))
	ns.DeletionTimestamp = &del
	if got := deleteDeadline(ns, now, time.Minute); !got.Equal(del.Add(time.Minute)) {
		t.Errorf("deletion deadline %v: an operator restart must not restart the clock", got)
	}
}
