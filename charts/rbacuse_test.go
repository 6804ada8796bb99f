package charts_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	mirrorv1 "github.com/siteops/siteops/api/mirror/v1alpha1"
)

const modulePath = "github.com/siteops/siteops"

// partCode is the folder of each part's packages; the code a part runs is these packages and
// every package of this module they import, tests left out.
var partCode = map[string]string{
	"decofile":    "internal/decofile",
	"tenant":      "internal/tenant",
	"mirror":      "internal/mirror",
	"webhookcert": "internal/webhookcert",
}

// codeFacts is what a static reading of a part's code finds: the qualified names it refers to
// ("k8s.io/api/core/v1.Secret"), the packages it imports, its string literals and the names of
// the functions and methods it calls.
type codeFacts struct {
	refs, imports, strings, calls map[string]bool
}

// readCode parses the non-test Go files of the packages under dir and of every module package
// they import, transitively.
func readCode(t *testing.T, dir string) codeFacts {
	t.Helper()
	f := codeFacts{refs: map[string]bool{}, imports: map[string]bool{}, strings: map[string]bool{}, calls: map[string]bool{}}
	fset := token.NewFileSet()
	seen := map[string]bool{}
	var queue []string
	err := filepath.WalkDir(filepath.Join("..", dir), func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			queue = append(queue, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for len(queue) > 0 {
		pkgDir := queue[0]
		queue = queue[1:]
		if seen[pkgDir] {
			continue
		}
		seen[pkgDir] = true
		files, _ := filepath.Glob(filepath.Join(pkgDir, "*.go"))
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			src, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			names := map[string]string{} // import name in this file -> import path
			for _, imp := range src.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				f.imports[p] = true
				name := p[strings.LastIndex(p, "/")+1:]
				if imp.Name != nil {
					name = imp.Name.Name
				}
				names[name] = p
				if rest, ok := strings.CutPrefix(p, modulePath+"/"); ok {
					queue = append(queue, filepath.Join("..", filepath.FromSlash(rest)))
				}
			}
			ast.Inspect(src, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.SelectorExpr:
					if id, ok := n.X.(*ast.Ident); ok && names[id.Name] != "" {
						f.refs[names[id.Name]+"."+n.Sel.Name] = true
					}
				case *ast.BasicLit:
					if n.Kind == token.STRING {
						if s, err := strconv.Unquote(n.Value); err == nil {
							f.strings[s] = true
						}
					}
				case *ast.CallExpr:
					switch fn := n.Fun.(type) {
					case *ast.SelectorExpr:
						f.calls[fn.Sel.Name] = true
					case *ast.Ident:
						f.calls[fn.Name] = true
					}
				}
				return true
			})
		}
	}
	return f
}

// goTypes maps each group/resource the manager's scheme knows to its Go types (item and list),
// as qualified names.
func goTypes(t *testing.T) map[schema.GroupResource][]string {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, decov1.AddToScheme, mirrorv1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	out := map[schema.GroupResource][]string{}
	for gvk, typ := range s.AllKnownTypes() {
		kind := strings.TrimSuffix(gvk.Kind, "List")
		plural, _ := meta.UnsafeGuessKindToResource(gvk.GroupVersion().WithKind(kind))
		gr := plural.GroupResource()
		out[gr] = append(out[gr], typ.PkgPath()+"."+typ.Name())
	}
	return out
}

// uses tells whether the code shows use of group/resource, and how.
func (f codeFacts) uses(types map[schema.GroupResource][]string, group, resource string) (string, bool) {
	base, sub, _ := strings.Cut(resource, "/")
	switch {
	case group == "*" && resource == "*":
		// Reading resources chosen at run time: a dynamic or metadata client.
		for _, p := range []string{"k8s.io/client-go/dynamic", "k8s.io/client-go/metadata", "k8s.io/client-go/metadata/metadatainformer", "k8s.io/client-go/dynamic/dynamicinformer"} {
			if f.imports[p] {
				return "imports " + p, true
			}
		}
		return "", false
	case group == "events.k8s.io" && resource == "events":
		if f.calls["GetEventRecorder"] || f.imports["k8s.io/client-go/tools/events"] {
			return "records events", true
		}
		return "", false
	}
	how, ok := "", false
	for _, typ := range types[schema.GroupResource{Group: group, Resource: base}] {
		if f.refs[typ] {
			how, ok = "refers to "+typ, true
			break
		}
	}
	if !ok && group != "" && f.strings[group] {
		// A kind the scheme does not know (Knative Services): a GroupVersionKind literal.
		for s := range f.strings {
			kind := strings.TrimSuffix(s, "List")
			plural, _ := meta.UnsafeGuessKindToResource(schema.GroupVersionKind{Group: group, Kind: kind})
			if kind != "" && plural.Resource == base {
				how, ok = "names "+group+" "+s, true
				break
			}
		}
	}
	if !ok {
		return "", false
	}
	switch sub {
	case "":
		return how, true
	case "status":
		return how + " and writes status", f.calls["Status"]
	case "finalizers":
		// Setting an owner reference that blocks the owner's deletion needs update on the
		// owner's finalizers; so does adding a finalizer.
		return how + " and owns objects or sets finalizers", f.calls["SetControllerReference"] || f.calls["SetOwnerReference"] || f.calls["AddFinalizer"]
	}
	return "", false
}

// TestPartRightsUsedByCode fails when a part's role grants a resource its code never touches,
// so a marker left behind by moved or deleted code, or a rule added to the wrong part, is found.
//
// It reads the code statically: a right on a resource counts as used when the part's non-test
// packages (and this module's packages they import) refer to the resource's Go type from the
// manager's scheme, or name its group and kind in string literals (kinds without Go types, such
// as Knative Services); a status subresource also needs a Status() call, finalizers an owner
// reference or a finalizer being set; events need an event recorder; the mirror's every-resource
// read needs a dynamic or metadata client. It checks resources, not verbs: a verb too many on a
// resource the part does use is left to review of the generated tables in docs/security.md.
// A check from API server audit logs of each part's tests would see verbs too, but needs every
// part's tests run under one audit policy; this one runs in milliseconds on every `go test`.
// The leader election Role is the manager's (controller-runtime's elector), not a part's.
func TestPartRightsUsedByCode(t *testing.T) {
	types := goTypes(t)
	m := render(t, "siteops", namespace, values(t, "flags: {webhook-self-signed: true, "+withPush+"}"))
	code := map[string]codeFacts{}
	checked := 0
	for _, g := range grants(t, m) {
		dir, ok := partCode[g.part]
		if !ok {
			if g.part != "manager" {
				t.Errorf("role %s is labelled for part %q, which has no code folder here", g.role, g.part)
			}
			continue
		}
		if _, ok := code[g.part]; !ok {
			code[g.part] = readCode(t, dir)
		}
		for _, r := range g.rules {
			for _, grp := range r.APIGroups {
				for _, res := range r.Resources {
					checked++
					if how, ok := code[g.part].uses(types, grp, res); !ok {
						t.Errorf("part %s (%s, %s) may %v %s/%s, but its code (%s) never uses them: drop the right or its marker", g.part, g.role, g.scope, r.Verbs, grp, res, dir)
					} else {
						t.Logf("%s: %s/%s: %s", g.part, grp, res, how)
					}
				}
			}
		}
	}
	if checked == 0 || len(code) != len(partCode) {
		t.Fatalf("checked %d rights of %d parts; want every part's", checked, len(code))
	}
	// The check must be able to fail: webhook configurations are the webhookcert part's only.
	if _, ok := code["tenant"].uses(types, "admissionregistration.k8s.io", "mutatingwebhookconfigurations"); ok {
		t.Error("the tenant part's code appears to use webhook configurations: the check proves nothing")
	}
}
