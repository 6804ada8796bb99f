package charts_test

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
)

// rbacDocs are the pages that list what each part may do, from the same generated table.
var rbacDocs = []string{"../docs/security.md", operationsDoc}

// rbacTable renders, as Markdown, every rule bound to the manager when every part runs with
// self-signed certificates and the push receiver on: the chart's roles, which are config/'s
// (TestRBACSameInBothInstalls).
func rbacTable(t *testing.T) string {
	t.Helper()
	m := render(t, "siteops", namespace, values(t, "flags: {webhook-self-signed: true, "+withPush+"}"))
	code := func(s []string) string {
		if len(s) == 0 {
			return "—"
		}
		for i, v := range s {
			if v == "" {
				v = `""`
			}
			s[i] = "`" + v + "`"
		}
		return strings.Join(s, ", ")
	}
	var b strings.Builder
	b.WriteString("\n| part | role (release `siteops`) | where | API group | resources | verbs | only these names |\n|---|---|---|---|---|---|---|\n")
	for _, g := range grants(t, m) {
		where := "cluster-wide"
		if g.scope != "cluster-wide" {
			where = "release namespace"
		}
		for _, r := range g.rules {
			fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s | %s | %s | %s |\n", g.part, g.role, where,
				code(r.APIGroups), code(r.Resources), code(r.Verbs), code(r.ResourceNames))
		}
	}
	return b.String()
}

// TestRBACDocsCurrent fails when the per-part RBAC table in docs/security.md or
// docs/operations.md differs from what the chart grants. `go test ./charts -run
// TestRBACDocsCurrent -update` rewrites it.
func TestRBACDocsCurrent(t *testing.T) {
	table := rbacTable(t)
	for _, path := range rbacDocs {
		doc, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		want, ok := replaceSection(doc, "rbac", table)
		if !ok {
			t.Fatalf("%s lacks the <!-- begin rbac --> / <!-- end rbac --> markers", path)
		}
		if bytes.Equal(doc, want) {
			continue
		}
		if *update {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s: the RBAC table is out of date with the chart's roles: run go test ./charts -run TestRBACDocsCurrent -update", path)
	}
}
