package charts_test

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/siteops/siteops/internal/manager"
)

var update = flag.Bool("update", false, "rewrite the generated sections of docs/operations.md")

const operationsDoc = "../docs/operations.md"

// secretValues names the chart value that supplies each credential flag.
var secretValues = map[string]string{
	"valkey-admin-password":    "secrets.valkeyAdminPassword",
	"valkey-sentinel-password": "secrets.valkeySentinelPassword",
	"redis-password":           "secrets.redisPassword",
	"redis-sentinel-password":  "secrets.redisSentinelPassword",
}

// flagGroups splits the manager's flags by the part that binds them.
func flagGroups() []struct {
	title string
	fs    *pflag.FlagSet
} {
	o := manager.DefaultOptions()
	bind := func(f func(*pflag.FlagSet)) *pflag.FlagSet {
		fs := pflag.NewFlagSet("", pflag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f(fs)
		return fs
	}
	dec := bind(o.Decofile.BindFlags)
	ten := bind(o.Tenant.BindFlags)
	mir := bind(o.Mirror.BindFlags)
	all, _ := managerFlags()
	mgr := pflag.NewFlagSet("", pflag.ContinueOnError)
	all.VisitAll(func(f *pflag.Flag) {
		if dec.Lookup(f.Name) == nil && ten.Lookup(f.Name) == nil && mir.Lookup(f.Name) == nil {
			mgr.AddFlag(f)
		}
	})
	return []struct {
		title string
		fs    *pflag.FlagSet
	}{{"Manager", mgr}, {"Decofile delivery (`decofile`)", dec}, {"Tenant cache isolation (`tenant`)", ten}, {"Cluster-to-git mirror (`mirror`)", mir}}
}

// flagTable renders every manager flag as Markdown, with its chart value.
func flagTable() string {
	var b strings.Builder
	cell := func(s string) string { return strings.NewReplacer("|", `\|`, "<", "&lt;").Replace(s) }
	for _, g := range flagGroups() {
		fmt.Fprintf(&b, "\n#### %s\n\n| flag | default | chart value | what it does |\n|---|---|---|---|\n", g.title)
		g.fs.VisitAll(func(f *pflag.Flag) {
			def := f.DefValue
			if def == "" || def == "[]" {
				def = "—"
			} else {
				def = "`" + cell(strings.Trim(def, "[]")) + "`"
			}
			value := "`flags." + f.Name + "`"
			if s, ok := secretValues[f.Name]; ok {
				value = "`" + s + "` (Secret)"
			}
			fmt.Fprintf(&b, "| `--%s` | %s | %s | %s |\n", f.Name, def, value, cell(f.Usage))
		})
	}
	return b.String()
}

var metricDecl = regexp.MustCompile(`prometheus\.New(Counter|Gauge|Histogram|Summary)(Vec)?\(prometheus\.\w+Opts\{\s*Name:\s*"([^"]+)",\s*Help:\s*"([^"]+)"(?s:.*?)\}(?:,\s*\[\]string\{([^}]*)\})?\)`)

// metricTable renders every metric declared under internal/ as Markdown.
func metricTable(t *testing.T) string {
	t.Helper()
	type row struct{ name, kind, labels, help, pkg string }
	var rows []row
	err := filepath.WalkDir(filepath.Join("..", "internal"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range metricDecl.FindAllSubmatch(src, -1) {
			labels := strings.NewReplacer(`"`, "", " ", "").Replace(string(m[5]))
			rows = append(rows, row{string(m[3]), strings.ToLower(string(m[1])), labels, strings.ReplaceAll(string(m[4]), "<", "&lt;"), filepath.ToSlash(filepath.Dir(strings.TrimPrefix(path, "../")))})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(rows, func(a, b row) int { return strings.Compare(a.name, b.name) })
	var b strings.Builder
	b.WriteString("\n| metric | type | labels | what it counts | package |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		labels := "—"
		if r.labels != "" {
			labels = "`" + strings.ReplaceAll(r.labels, ",", "`, `") + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | `%s` |\n", r.name, r.kind, labels, r.help, r.pkg)
	}
	return b.String()
}

// replaceSection swaps the text between <!-- begin NAME --> and <!-- end NAME -->.
func replaceSection(doc []byte, name, body string) ([]byte, bool) {
	begin, end := []byte("<!-- begin "+name+" -->\n"), []byte("<!-- end "+name+" -->")
	i, j := bytes.Index(doc, begin), bytes.Index(doc, end)
	if i < 0 || j < i {
		return doc, false
	}
	out := append([]byte{}, doc[:i+len(begin)]...)
	out = append(out, strings.TrimPrefix(body, "\n")...)
	out = append(out, '\n')
	return append(out, doc[j:]...), true
}

// TestOperationsDocCurrent fails when the flag or metric tables in docs/operations.md differ
// from the code. `go test ./charts -run TestOperationsDocCurrent -update` rewrites them.
func TestOperationsDocCurrent(t *testing.T) {
	doc, err := os.ReadFile(operationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	want := doc
	for name, body := range map[string]string{"flags": flagTable(), "metrics": metricTable(t)} {
		var ok bool
		if want, ok = replaceSection(want, name, body); !ok {
			t.Fatalf("%s lacks the <!-- begin %s --> / <!-- end %s --> markers", operationsDoc, name, name)
		}
	}
	if bytes.Equal(doc, want) {
		return
	}
	if *update {
		if err := os.WriteFile(operationsDoc, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s is out of date with the manager's flags or metrics: run go test ./charts -run TestOperationsDocCurrent -update", operationsDoc)
}

var mdLink = regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)

// docPages lists the Markdown pages under docs/, in subfolders too, leaving out docs/reference/:
// those pages are generated and checked by their own tests, and docs/reference.md indexes them.
func docPages(t *testing.T) []string {
	t.Helper()
	docs := filepath.Join("..", "docs")
	var pages []string
	err := filepath.WalkDir(docs, func(path string, d os.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && path == filepath.Join(docs, "reference"):
			return filepath.SkipDir
		case !d.IsDir() && strings.HasSuffix(path, ".md"):
			pages = append(pages, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pages
}

// relativeLinks returns the targets of a page's relative links as written, anchors dropped.
func relativeLinks(t *testing.T, page string) []string {
	t.Helper()
	src, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, m := range mdLink.FindAllStringSubmatch(string(src), -1) {
		if !strings.Contains(m[1], "://") && !strings.HasPrefix(m[1], "mailto:") {
			targets = append(targets, m[1])
		}
	}
	return targets
}

// TestDocsIndex fails when a page under docs/ (in a subfolder too; docs/reference/ aside) is
// linked neither from docs/README.md nor from an index that docs/README.md links (the README.md
// of a folder, such as docs/design/README.md), or when a relative link in any of those pages or
// in the project README points at a file that does not exist.
func TestDocsIndex(t *testing.T) {
	docs := filepath.Join("..", "docs")
	index := filepath.Join(docs, "README.md")
	pages := docPages(t)
	if len(pages) < 10 {
		t.Fatalf("found only %d pages under docs/", len(pages))
	}
	// The indexes are docs/README.md and each folder's README.md under docs/ that an index links.
	linked := map[string]bool{}
	for queue := []string{index}; len(queue) > 0; queue = queue[1:] {
		for _, target := range relativeLinks(t, queue[0]) {
			path := filepath.Join(filepath.Dir(queue[0]), target)
			if linked[path] {
				continue
			}
			linked[path] = true
			if filepath.Base(path) == "README.md" && strings.HasPrefix(path, docs+string(filepath.Separator)) {
				queue = append(queue, path)
			}
		}
	}
	for _, p := range pages {
		if p != index && !linked[p] {
			rel, _ := filepath.Rel(docs, p)
			t.Errorf("docs/README.md does not link %s, nor does an index it links (a folder's README.md)", filepath.ToSlash(rel))
		}
	}
	for _, p := range append(pages, filepath.Join("..", "README.md")) {
		for _, target := range relativeLinks(t, p) {
			if _, err := os.Stat(filepath.Join(filepath.Dir(p), target)); err != nil {
				t.Errorf("%s links %s, which does not exist", p, target)
			}
		}
	}
}

// TestMigrationNamesContract fails when api/deco/v1alpha1/names.go declares a name read by
// software we do not own (annotation, label, env var, ConfigMap or Secret key) that
// docs/migration.md does not mention.
func TestMigrationNamesContract(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "api", "deco", "v1alpha1", "names.go"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "docs", "migration.md"))
	if err != nil {
		t.Fatal(err)
	}
	contract := regexp.MustCompile(`^(deco\.sites/|app\.deco/|DECO_|LOADER_CACHE_|decofile\.(json|bin)$|timestamp\.txt$|valkey-acl$)`)
	found := 0
	for _, m := range regexp.MustCompile(`(?m)^\s*\w+\s*=\s*"([^"]+)"`).FindAllStringSubmatch(string(src), -1) {
		if !contract.MatchString(m[1]) {
			continue
		}
		found++
		if !bytes.Contains(doc, []byte("`"+m[1]+"`")) {
			t.Errorf("docs/migration.md does not mention the contract name %s", m[1])
		}
	}
	if found < 10 {
		t.Fatalf("found only %d contract names in names.go", found)
	}
}

var (
	alertRule = regexp.MustCompile(`(?m)^\s*- alert: (\w+)\s*$`)
	alertRow  = regexp.MustCompile("(?m)^\\| `(Siteops\\w+)` \\|")
)

// TestAlertsDocumented fails when the chart's PrometheusRule ships an alert that the Alerts
// table of docs/operations.md does not explain, or the table names one the chart lacks.
func TestAlertsDocumented(t *testing.T) {
	rules, err := os.ReadFile(filepath.Join("siteops", "templates", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(operationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Alerts\n")
	if !ok {
		t.Fatalf("%s has no Alerts section", operationsDoc)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var shipped, documented []string
	for _, m := range alertRule.FindAllStringSubmatch(string(rules), -1) {
		shipped = append(shipped, m[1])
	}
	for _, m := range alertRow.FindAllStringSubmatch(section, -1) {
		documented = append(documented, m[1])
	}
	if len(shipped) == 0 {
		t.Fatal("no alert found in the chart's PrometheusRule")
	}
	for _, a := range shipped {
		if !slices.Contains(documented, a) {
			t.Errorf("alert %s is shipped by the chart but has no row in the Alerts table of %s", a, operationsDoc)
		}
	}
	for _, a := range documented {
		if !slices.Contains(shipped, a) {
			t.Errorf("the Alerts table of %s names %s, which the chart does not ship", operationsDoc, a)
		}
	}
}
