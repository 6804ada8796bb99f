// Package lint checks a repository's wave layout before it reaches a cluster: placement, the
// Flux Kustomization chain, SOPS decryption on every wave, kustomize builds and their parity with
// the pre-split layout, and Flux variable substitution.
package lint

import (
	"bytes"
	"fmt"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"

	kustv1 "github.com/fluxcd/kustomize-controller/api/v1"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/kio"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
	"sigs.k8s.io/yaml"

	"github.com/siteops/siteops/internal/waves"
	"github.com/siteops/siteops/internal/waves/plan"
	"github.com/siteops/siteops/internal/waves/repo"
)

// Options tune Run.
type Options struct {
	// CompareRef is a git ref of the pre-split layout; the waves must build the same resources.
	CompareRef string
	// Plan names the Kustomizations.
	Plan plan.Options
}

// Check names a kind of problem.
type Check string

// The checks lint runs.
const (
	CheckCatalog      Check = "catalog"
	CheckPlacement    Check = "placement"
	CheckBuild        Check = "build"
	CheckBase         Check = "base"
	CheckChain        Check = "chain"
	CheckDecryption   Check = "decryption"
	CheckSubstitution Check = "substitution"
	CheckParity       Check = "parity"
	CheckOwnership    Check = "ownership"
)

// Problem is one finding.
type Problem struct {
	Check   Check
	Message string
}

func (p Problem) String() string { return string(p.Check) + ": " + p.Message }

// Result is what Run found.
type Result struct {
	Problems []Problem
	// Waves is the number of Kustomizations planned; Resources the number of resources they build.
	Waves, Resources int
	// Granularity is the layout checked.
	Granularity plan.Granularity
}

type linter struct {
	r   *repo.Repo
	o   Options
	s   *waves.State
	res Result
	// builds holds each group's build by Kustomization name.
	builds map[string]resmap.ResMap
}

func (l *linter) add(c Check, format string, a ...any) {
	l.res.Problems = append(l.res.Problems, Problem{Check: c, Message: fmt.Sprintf(format, a...)})
}

// Run lints the repository.
func Run(r *repo.Repo, o Options) Result {
	if o.Plan.Prefix == "" {
		o.Plan = plan.DefaultOptions
	}
	l := &linter{r: r, o: o, builds: map[string]resmap.ResMap{}}
	s, err := waves.Load(r, o.Plan)
	if err != nil {
		// Cycles, missing anchors and invalid definitions stop every later check.
		l.add(CheckCatalog, "%v", err)
		return l.res
	}
	l.s = s
	l.res.Waves = len(s.Plan.Groups)
	l.res.Granularity = s.Plan.Granularity
	l.placement()
	l.wavesBuild()
	flux := l.base()
	l.ownership(flux)
	l.environments(flux)
	if o.CompareRef != "" {
		l.parity()
	}
	return l.res
}

func (l *linter) apps(elem ...string) string {
	return path.Join(append([]string{l.r.Layout.Apps}, elem...)...)
}

func (l *linter) placement() {
	files := make([]string, 0, len(l.s.Present))
	for f := range l.s.Present {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		cur := l.s.Present[f]
		g, ok := l.s.Plan.GroupOf(f)
		if !ok {
			l.add(CheckPlacement, "%s matches no service, database or extra unit: add it to the catalog (or to the extra units) or remove it", l.apps(cur))
			continue
		}
		if want := g.Dir + "/" + f; cur != want {
			node := strings.TrimSuffix(strings.TrimSuffix(f, ".sops.yaml"), ".yaml")
			l.add(CheckPlacement, "%s belongs in %s/ (wave %d): run `siteops waves emit --move` (%s)", l.apps(cur), l.apps(g.Dir), g.Wave, reason(l.s, node, f))
		}
	}
}

func reason(s *waves.State, node, file string) string {
	for _, n := range []string{node, strings.TrimSuffix(node, "-bootstrap-secret"), strings.TrimSuffix(node, "-app")} {
		if s.Waves.Has(n) {
			return n + ": " + s.Waves.Reason(n)
		}
	}
	return "extra unit file " + file
}

// wavesBuild checks each wave folder's kustomization and builds it.
func (l *linter) wavesBuild() {
	want := map[string]bool{}
	for _, g := range l.s.Plan.Groups {
		want[g.Dir] = true
		k := l.r.Path(l.apps(g.Dir, "kustomization.yaml"))
		if !l.r.FS.Exists(k) {
			l.add(CheckBuild, "%s has no kustomization.yaml: run `siteops waves emit`", l.apps(g.Dir))
			continue
		}
		if listed, err := listed(l.r, k); err != nil {
			l.add(CheckBuild, "%v", err)
		} else if missing := diff(g.Files, listed); len(missing) > 0 {
			l.add(CheckBuild, "%s/kustomization.yaml does not list %s: run `siteops waves emit`", l.apps(g.Dir), strings.Join(missing, ", "))
		}
		m, err := l.r.Build(l.apps(g.Dir))
		if err != nil {
			l.add(CheckBuild, "%v", err)
			continue
		}
		l.builds[g.Name] = m
		l.res.Resources += m.Size()
	}
	names, _ := l.r.FS.ReadDir(l.r.Path(l.r.Layout.Apps))
	for _, n := range names {
		if strings.HasPrefix(n, "wave-") && l.r.FS.IsDir(l.r.Path(l.apps(n))) && !want[n] && !empty(l.r, l.apps(n)) {
			l.add(CheckBuild, "%s is a wave folder no planned wave uses: move its files or run `siteops waves emit` to drop it", l.apps(n))
		}
	}
}

func listed(r *repo.Repo, file string) ([]string, error) {
	data, err := r.FS.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", r.Rel(file), err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return nil, fmt.Errorf("parse %s: %w", r.Rel(file), err)
	}
	return k.Resources, nil
}

// diff returns the elements of a not in b.
func diff(a, b []string) []string {
	in := map[string]bool{}
	for _, x := range b {
		in[x] = true
	}
	var out []string
	for _, x := range a {
		if !in[x] {
			out = append(out, x)
		}
	}
	return out
}

// base checks clusters/base: it lists every wave, each wave Kustomization is wired into the chain,
// and no dependsOn cycle exists. It returns the Flux Kustomizations of the base build.
func (l *linter) base() map[string]*kustv1.Kustomization {
	baseDir := path.Join(l.r.Layout.Clusters, "base")
	if files, err := listed(l.r, l.r.Path(baseDir, "kustomization.yaml")); err != nil {
		l.add(CheckBase, "%v", err)
	} else {
		var names []string
		for _, g := range l.s.Plan.Groups {
			names = append(names, g.Name+".yaml")
		}
		for _, m := range diff(names, files) {
			l.add(CheckBase, "%s/kustomization.yaml does not list %s: that wave would never be applied; run `siteops waves emit`", baseDir, m)
		}
	}
	m, err := l.r.Build(baseDir)
	if err != nil {
		l.add(CheckBuild, "%v", err)
		return nil
	}
	flux := fluxKustomizations(m)
	l.chain(flux, baseDir)
	return flux
}

func fluxKustomizations(m resmap.ResMap) map[string]*kustv1.Kustomization {
	out := map[string]*kustv1.Kustomization{}
	for _, r := range m.Resources() {
		if r.GetKind() != kustv1.KustomizationKind || !strings.HasPrefix(r.GetApiVersion(), kustv1.GroupVersion.Group+"/") {
			continue
		}
		data, err := r.AsYAML()
		if err != nil {
			continue
		}
		k := &kustv1.Kustomization{}
		if yaml.Unmarshal(data, k) == nil {
			out[k.Name] = k
		}
	}
	return out
}

func (l *linter) chain(flux map[string]*kustv1.Kustomization, where string) {
	for _, g := range l.s.Plan.Groups {
		k, ok := flux[g.Name]
		if !ok {
			l.add(CheckChain, "%s does not define Kustomization %s: run `siteops waves emit`", where, g.Name)
			continue
		}
		var deps []string
		for _, d := range k.Spec.DependsOn {
			deps = append(deps, d.Name)
		}
		if !slices.Equal(sorted(deps), sorted(g.DependsOn)) {
			l.add(CheckChain, "Kustomization %s dependsOn [%s], want [%s]", g.Name, strings.Join(deps, " "), strings.Join(g.DependsOn, " "))
		}
		if want := "./" + l.apps(g.Dir); path.Clean(k.Spec.Path) != path.Clean(want) {
			l.add(CheckChain, "Kustomization %s has path %q, want %q", g.Name, k.Spec.Path, want)
		}
		if !k.Spec.Prune || !k.Spec.Wait {
			l.add(CheckChain, "Kustomization %s must have prune: true and wait: true (prune=%t wait=%t)", g.Name, k.Spec.Prune, k.Spec.Wait)
		}
	}
	// A dependsOn cycle stalls Flux without an error.
	state := map[string]int{}
	var stack []string
	var visit func(n string) bool
	visit = func(n string) bool {
		state[n] = 1
		stack = append(stack, n)
		if k, ok := flux[n]; ok {
			for _, d := range k.Spec.DependsOn {
				switch state[d.Name] {
				case 0:
					if visit(d.Name) {
						return true
					}
				case 1:
					i := len(stack) - 1
					for stack[i] != d.Name {
						i--
					}
					l.add(CheckChain, "dependsOn cycle: %s → %s (Flux would wait forever)", strings.Join(stack[i:], " → "), d.Name)
					return true
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[n] = 2
		return false
	}
	names := make([]string, 0, len(flux))
	for n := range flux {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if state[n] == 0 && visit(n) {
			return
		}
	}
}

// environments checks, per environment build, decryption and substitution of every wave.
func (l *linter) environments(base map[string]*kustv1.Kustomization) {
	envs, err := l.r.Environments()
	if err != nil {
		l.add(CheckBase, "%v", err)
		return
	}
	type target struct {
		where string
		flux  map[string]*kustv1.Kustomization
		m     resmap.ResMap
	}
	var targets []target
	for _, env := range envs {
		dir := path.Join(l.r.Layout.Clusters, env)
		m, err := l.r.Build(dir)
		if err != nil {
			l.add(CheckBuild, "%v", err)
			continue
		}
		targets = append(targets, target{where: dir, flux: fluxKustomizations(m), m: m})
	}
	if len(envs) == 0 && base != nil {
		m, _ := l.r.Build(path.Join(l.r.Layout.Clusters, "base"))
		targets = append(targets, target{where: path.Join(l.r.Layout.Clusters, "base"), flux: base, m: m})
	}
	for _, t := range targets {
		for _, g := range l.s.Plan.Groups {
			k, ok := t.flux[g.Name]
			if !ok {
				continue // reported by the chain check
			}
			var sops []string
			for _, f := range g.Files {
				if strings.HasSuffix(f, ".sops.yaml") {
					sops = append(sops, f)
				}
			}
			if len(sops) > 0 && (k.Spec.Decryption == nil || k.Spec.Decryption.Provider != "sops") {
				l.add(CheckDecryption, "%s: %s holds SOPS files (%s) but has no decryption patch: Flux would apply them encrypted; run `siteops waves emit`", t.where, g.Name, strings.Join(sops, ", "))
			}
			l.substitution(t.where, t.m, g, k)
		}
	}
}

// varRef matches Flux's ${VAR} forms; group 1 is a leading '$' (an escape), 2 the name, 3 an
// operator that carries a default.
var varRef = regexp.MustCompile(`(\$?)\$\{([_a-zA-Z][_a-zA-Z0-9]*)(:?[-=][^}]*)?\}`)

const substituteAnnotation = "kustomize.toolkit.fluxcd.io/substitute"

// substitution checks that every ${VAR} the wave's files use has a value, because the wave
// Kustomizations substitute strictly.
func (l *linter) substitution(where string, env resmap.ResMap, g plan.Group, k *kustv1.Kustomization) {
	vars := map[string]bool{}
	var sources []string
	if pb := k.Spec.PostBuild; pb != nil {
		for n := range pb.Substitute {
			vars[n] = true
		}
		for _, ref := range pb.SubstituteFrom {
			sources = append(sources, ref.Kind+"/"+ref.Name)
			keys, found := l.sourceKeys(env, ref.Kind, ref.Name, k.Namespace)
			if !found && !ref.Optional {
				l.add(CheckSubstitution, "%s: %s substitutes from %s/%s, which is not defined in the repository", where, g.Name, ref.Kind, ref.Name)
			}
			for _, n := range keys {
				vars[n] = true
			}
		}
	}
	for _, f := range g.Files {
		data, err := l.r.FS.ReadFile(l.r.Path(l.apps(l.s.Present[f])))
		if err != nil {
			continue // reported by placement or build
		}
		nodes, err := (&kio.ByteReader{Reader: bytes.NewReader(data), OmitReaderAnnotations: true}).Read()
		if err != nil {
			l.add(CheckBuild, "%s: %v", f, err)
			continue
		}
		seen := map[string]bool{}
		for _, n := range nodes {
			if n.GetAnnotations()[substituteAnnotation] == "disabled" {
				continue
			}
			s, _ := n.String()
			for _, m := range varRef.FindAllStringSubmatch(s, -1) {
				if m[1] != "" || m[3] != "" || vars[m[2]] || seen[m[2]] {
					continue
				}
				seen[m[2]] = true
				from := "no substituteFrom"
				if len(sources) > 0 {
					from = strings.Join(sources, ", ")
				}
				l.add(CheckSubstitution, "%s: %s (%s) uses ${%s}, which has no value in %s and no default: the wave would fail to build", where, f, g.Name, m[2], from)
			}
		}
	}
}

// sourceKeys finds the ConfigMap or Secret named by substituteFrom in the environment build,
// and returns its keys.
func (l *linter) sourceKeys(env resmap.ResMap, kind, name, ns string) ([]string, bool) {
	if env == nil {
		return nil, false
	}
	for _, r := range env.Resources() {
		if r.GetKind() != kind || r.GetName() != name || (r.GetNamespace() != "" && ns != "" && r.GetNamespace() != ns) {
			continue
		}
		var keys []string
		for _, field := range []string{"data", "stringData"} {
			m, err := r.Pipe(kyaml.Lookup(field))
			if err != nil || m == nil {
				continue
			}
			fields, _ := m.Fields()
			keys = append(keys, fields...)
		}
		return keys, true
	}
	return nil, false
}

// parity builds the pre-split layout at CompareRef and compares it with the waves' builds.
func (l *linter) parity() {
	old, err := repo.AtRef(l.r.Root, l.o.CompareRef, l.r.Layout)
	if err != nil {
		l.add(CheckParity, "%v", err)
		return
	}
	dir := l.r.Layout.Apps
	// The pre-split `apps` Kustomization names the folder it built.
	if data, err := old.FS.ReadFile(old.Path(l.r.Layout.Clusters, "base", l.o.Plan.Prefix+".yaml")); err == nil {
		k := &kustv1.Kustomization{}
		if yaml.Unmarshal(data, k) == nil && k.Spec.Path != "" {
			dir = path.Clean(strings.TrimPrefix(k.Spec.Path, "./"))
		}
	}
	m, err := old.Build(dir)
	if err != nil {
		l.add(CheckParity, "%v", err)
		return
	}
	before := map[string]bool{}
	for _, r := range m.Resources() {
		before[r.CurId().String()] = true
	}
	after := map[string]bool{}
	for _, b := range l.builds {
		for _, r := range b.Resources() {
			after[r.CurId().String()] = true
		}
	}
	var missing, extra []string
	for id := range before {
		if !after[id] {
			missing = append(missing, id)
		}
	}
	for id := range after {
		if !before[id] {
			extra = append(extra, id)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(before) != l.res.Resources || len(missing) > 0 || len(extra) > 0 {
		msg := fmt.Sprintf("the waves build %d resources, the pre-split layout %s at %s built %d", l.res.Resources, dir, l.o.CompareRef, len(before))
		if len(missing) > 0 {
			msg += "; missing: " + strings.Join(missing, ", ")
		}
		if len(extra) > 0 {
			msg += "; new: " + strings.Join(extra, ", ")
		}
		l.add(CheckParity, "%s", msg)
	}
}

// ownership finds app-tier Kustomizations besides the waves (the pre-split `apps`) that apply
// the same objects as a wave: two owners fight over them and each prunes what the other adopts.
func (l *linter) ownership(flux map[string]*kustv1.Kustomization) {
	waveOf := map[string]string{}
	for name, b := range l.builds {
		for _, r := range b.Resources() {
			waveOf[r.CurId().String()] = name
		}
	}
	planned := map[string]bool{}
	for _, g := range l.s.Plan.Groups {
		planned[g.Name] = true
	}
	names := make([]string, 0, len(flux))
	for n := range flux {
		names = append(names, n)
	}
	sort.Strings(names)
	apps := l.r.Layout.Apps
	for _, n := range names {
		p := path.Clean(strings.TrimPrefix(flux[n].Spec.Path, "./"))
		if planned[n] || (p != apps && !strings.HasPrefix(p, apps+"/")) {
			continue
		}
		m, err := l.r.Build(p)
		if err != nil {
			l.add(CheckOwnership, "Kustomization %s (./%s) is still in clusters/base but its path no longer builds: remove it once the cut-over is done (see `siteops waves cutover-check`): %v", n, p, err)
			continue
		}
		var shared []string
		for _, r := range m.Resources() {
			if w, ok := waveOf[r.CurId().String()]; ok {
				shared = append(shared, r.CurId().String()+" ("+w+")")
			}
		}
		if len(shared) > 0 {
			more := ""
			if len(shared) > 3 {
				more = fmt.Sprintf(" and %d more", len(shared)-3)
				shared = shared[:3]
			}
			l.add(CheckOwnership, "Kustomization %s (./%s) applies %s%s as well as a wave: two owners prune each other's objects; remove %s in the cut-over", n, p, strings.Join(shared, ", "), more, n)
		}
	}
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	sort.Strings(out)
	return out
}

// empty reports whether a folder holds nothing (git does not record such a folder).
func empty(r *repo.Repo, dir string) bool {
	names, err := r.FS.ReadDir(r.Path(dir))
	return err == nil && len(names) == 0
}
