package provision

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

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
	for _, u := range []string{"", "default", "lock", "operator", "replicator"} {
		if !Reserved(u, []string{"operator", "replicator"}) {
			t.Errorf("%q not reserved", u)
		}
	}
	if !Reserved("default", nil) || !Reserved("lock", nil) {
		t.Error("default and lock must stay reserved whatever the flag says")
	}
	if Reserved("loja", nil) {
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

func TestStateFromKeepsValidDigestsOnly(t *testing.T) {
	cur, old := acl.HashPassword("p"), acl.HashPassword("o")
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		AnnotationPasswordDigest: cur,
		AnnotationRetiring:       old + ", not-a-digest,," + cur + "," + strings.ToUpper(old),
		AnnotationRotated:        "2026-1",
	}}}
	st, err := StateFrom(ns)
	if err == nil || strings.Contains(err.Error(), "not-a-digest") {
		t.Errorf("invalid retiring values: error %v (must say so without quoting them)", err)
	}
	if st.Digest != cur || !slices.Equal(st.Retiring, []string{old}) || st.Rotated != "2026-1" {
		t.Fatalf("StateFrom = %+v", st)
	}
	ns.Annotations[AnnotationPasswordDigest] = "x"
	if st, err := StateFrom(ns); err == nil || st.Digest != "" {
		t.Fatalf("invalid current digest accepted: %+v %v", st, err)
	}
	a := map[string]string{"other": "kept"}
	State{Digest: cur, Retiring: []string{old}}.Apply(a)
	State{Digest: cur}.Apply(a)
	if a[AnnotationPasswordDigest] != cur || a["other"] != "kept" || len(a) != 2 {
		t.Fatalf("Apply left %v", a)
	}
	if u := (State{Digest: cur}).User("loja"); u.Validate() != nil || u.CurrentHash() != cur {
		t.Fatalf("User() = %+v", u)
	}
}

func TestSecretDriftNamesFieldsNotValues(t *testing.T) {
	good := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Labels:      map[string]string{decov1.LabelManagedBy: decov1.ManagedByValue},
			Annotations: map[string]string{"reflector": "x"},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{decov1.ValkeyACLUsernameKey: []byte("loja"), decov1.ValkeyACLPasswordKey: []byte("p")},
	}
	if d := SecretDrift(good, "loja", "p"); len(d) != 0 {
		t.Fatalf("drift in the operator's own Secret: %v", d)
	}
	bad := good.DeepCopy()
	bad.Data[decov1.ValkeyACLUsernameKey] = []byte("victim")
	bad.Data[decov1.ValkeyACLPasswordKey] = []byte("forged")
	bad.Data["EXTRA"] = []byte("1")
	bad.Immutable = ptr.To(true)
	bad.Annotations[AnnotationRetiring] = "garbage"
	delete(bad.Labels, decov1.LabelManagedBy)
	d := SecretDrift(bad, "loja", "p")
	want := []string{"username", "password", "key EXTRA", "immutable", "label " + decov1.LabelManagedBy, "annotation " + AnnotationRetiring}
	if !slices.Equal(d, want) {
		t.Fatalf("SecretDrift = %v, want %v", d, want)
	}
	if strings.Contains(strings.Join(d, " "), "forged") {
		t.Fatal("drift quotes the password")
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

func TestCoveredKeyPrefix(t *testing.T) {
	for _, c := range []struct {
		user     string
		reserved []string
		want     string
	}{
		{"siteops", []string{"siteops"}, "siteops"},
		{"siteops", []string{"siteops:"}, "siteops:"},             // a trailing ':' is the mirror's own separator
		{"siteops", []string{"siteops:cell-a"}, "siteops:cell-a"}, // ~siteops:* covers a nested prefix
		{"cell", []string{"lock:cell"}, "lock:cell"},              // ~lock:cell:* covers it
		{"siteops-a", []string{"siteops"}, ""},
		{"siteop", []string{"siteops"}, ""},
		{"shop", []string{"mirror", "siteops"}, ""},
	} {
		if got := CoveredKeyPrefix(c.user, c.reserved); got != c.want {
			t.Errorf("CoveredKeyPrefix(%q, %q) = %q, want %q", c.user, c.reserved, got, c.want)
		}
	}
}
