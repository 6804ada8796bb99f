package sources

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoSwitchOnTheSourceKindOutsideTheRegistry: a kind is one package plus one line of
// kinds; code elsewhere that compares spec.source with a kind, or switches on it, would be a
// ninth place to change for the next kind. Building a spec (a composite literal) is fine.
func TestNoSwitchOnTheSourceKindOutsideTheRegistry(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	allowed := []string{filepath.Join(root, "api") + "/", filepath.Join(root, "internal", "decofile", "sources") + "/"}
	// spec.source, status.sourceType, or a Source* constant of the API package.
	isKind := func(e ast.Expr) bool {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		if sel.Sel.Name == "Source" || sel.Sel.Name == "SourceType" {
			return true
		}
		pkg, ok := sel.X.(*ast.Ident)
		return ok && strings.HasPrefix(pkg.Name, "decov1") && strings.HasPrefix(sel.Sel.Name, "Source")
	}
	fset := token.NewFileSet()
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		for _, a := range allowed {
			if strings.HasPrefix(path, a) {
				return nil
			}
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BinaryExpr:
				if (n.Op == token.EQL || n.Op == token.NEQ) && (isKind(n.X) || isKind(n.Y)) {
					t.Errorf("%s: compares with the source kind; ask the sources registry instead", fset.Position(n.Pos()))
				}
			case *ast.SwitchStmt:
				if n.Tag != nil && isKind(n.Tag) {
					t.Errorf("%s: switches on the source kind; ask the sources registry instead", fset.Position(n.Pos()))
				}
			case *ast.CaseClause:
				for _, e := range n.List {
					if isKind(e) {
						t.Errorf("%s: a case names a source kind; ask the sources registry instead", fset.Position(e.Pos()))
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked only %d files: is the module root %s?", checked, root)
	}
}
