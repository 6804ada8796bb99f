package crd_test

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/siteops/siteops/config/crd"
)

var update = flag.Bool("update", false, "rewrite docs/reference/api from the CRDs")

// apiReference is where the generated field reference lives, one page per kind.
var apiReference = filepath.Join("..", "..", "docs", "reference", "api")

// TestAPIReferenceCurrent fails when docs/reference/api differs from the CRDs that
// `make manifests` generates from the API types; `go test ./config/crd -run
// TestAPIReferenceCurrent -update` writes it again.
func TestAPIReferenceCurrent(t *testing.T) {
	crds, err := crd.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	for _, c := range crds {
		for _, v := range c.Spec.Versions {
			if v.Served {
				want[c.Spec.Names.Kind+".md"] = kindPage(c, v)
			}
		}
	}
	if len(want) != len(crds) || want["Decofile.md"] == nil {
		t.Fatalf("pages for %d of %d CRDs, Decofile among them: %v", len(want), len(crds), want["Decofile.md"] != nil)
	}
	if *update {
		if err := os.RemoveAll(apiReference); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(apiReference, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, body := range want {
			if err := os.WriteFile(filepath.Join(apiReference, name), body, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	have, err := filepath.Glob(filepath.Join(apiReference, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range want {
		b, _ := os.ReadFile(filepath.Join(apiReference, name))
		if !bytes.Equal(b, body) {
			t.Errorf("%s is out of date with the CRDs: run go test ./config/crd -run TestAPIReferenceCurrent -update", filepath.Join(apiReference, name))
		}
	}
	for _, p := range have {
		if _, ok := want[filepath.Base(p)]; !ok {
			t.Errorf("%s documents no CRD: run go test ./config/crd -run TestAPIReferenceCurrent -update", p)
		}
	}
}

// kindPage renders one served version of a CRD: its names, its printer columns and every field.
func kindPage(c *apiextensionsv1.CustomResourceDefinition, v apiextensionsv1.CustomResourceDefinitionVersion) []byte {
	var b bytes.Buffer
	n := c.Spec.Names
	fmt.Fprintf(&b, "# %s\n\n", n.Kind)
	fmt.Fprintf(&b, "Generated from the CRD `%s` (`make manifests` makes it from `api/`); do not edit.\n\n", c.Name)
	fmt.Fprintf(&b, "| | |\n|---|---|\n| API version | `%s/%s` |\n| scope | %s |\n| plural | `%s` |\n", c.Spec.Group, v.Name, c.Spec.Scope, n.Plural)
	if len(n.ShortNames) > 0 {
		fmt.Fprintf(&b, "| short names | `%s` |\n", strings.Join(n.ShortNames, "`, `"))
	}
	if len(n.Categories) > 0 {
		fmt.Fprintf(&b, "| categories | `%s` |\n", strings.Join(n.Categories, "`, `"))
	}
	if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
		return b.Bytes()
	}
	root := v.Schema.OpenAPIV3Schema
	if d := firstParagraph(root.Description); d != "" {
		fmt.Fprintf(&b, "\n%s\n", d)
	}
	if len(v.AdditionalPrinterColumns) > 0 {
		b.WriteString("\n## Columns of `kubectl get`\n\n| column | value | type |\n|---|---|---|\n")
		for _, col := range v.AdditionalPrinterColumns {
			fmt.Fprintf(&b, "| %s | `%s` | %s |\n", col.Name, col.JSONPath, col.Type)
		}
	}
	for _, part := range []string{"spec", "status"} {
		s, ok := root.Properties[part]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "\n## `.%s`\n\n| field | type | required | description |\n|---|---|---|---|\n", part)
		fields(&b, "."+part, s)
	}
	return b.Bytes()
}

// fields writes a row for each property under s, depth first, in name order.
func fields(b *bytes.Buffer, path string, s apiextensionsv1.JSONSchemaProps) {
	if s.Type == "array" && s.Items != nil && s.Items.Schema != nil {
		fields(b, path+"[]", *s.Items.Schema)
		return
	}
	for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
		p := s.Properties[name]
		required := ""
		if slices.Contains(s.Required, name) {
			required = "yes"
		}
		fmt.Fprintf(b, "| `%s.%s` | %s | %s | %s |\n", path, name, typeOf(p), required, cell(firstParagraph(p.Description)))
		fields(b, path+"."+name, p)
	}
}

// typeOf names a property's type as a reader needs it: arrays by their items, enums by values.
func typeOf(p apiextensionsv1.JSONSchemaProps) string {
	t := p.Type
	switch {
	case t == "array" && p.Items != nil && p.Items.Schema != nil:
		t = "[]" + typeOf(*p.Items.Schema)
	case t == "" && p.XIntOrString:
		t = "int or string"
	case t == "" && p.XPreserveUnknownFields != nil && *p.XPreserveUnknownFields:
		t = "any"
	}
	if len(p.Enum) > 0 {
		var vals []string
		for _, e := range p.Enum {
			vals = append(vals, strings.Trim(string(e.Raw), `"`))
		}
		t += ": " + strings.Join(vals, ", ")
	}
	return t
}

// firstParagraph is a description up to its first blank line, on one line.
func firstParagraph(d string) string {
	d, _, _ = strings.Cut(strings.TrimSpace(d), "\n\n")
	return strings.Join(strings.Fields(d), " ")
}

// cell escapes text for a Markdown table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
