package web

import (
	"bytes"
	"html/template"
	"net/http"
	"slices"

	"github.com/siteops/siteops/internal/ui/access"
	"github.com/siteops/siteops/internal/waves/diagram"
)

// wavesPage is the data of the waves page.
type wavesPage struct {
	// Off says why there is no graph: the UI was started without a repository.
	Off bool
	// SVG is Graphviz's drawing, embedded so hovering a node shows its blast radius.
	SVG template.HTML
	// SVGError says why there is no drawing (Graphviz missing, say); the table still shows.
	SVGError string
	Waves    int
	// Nodes by blast radius, the widest first.
	Nodes []diagram.Node
}

func (s *Server) waves(w http.ResponseWriter, r *http.Request, p access.Person) {
	var page wavesPage
	if s.b.Waves == nil {
		page.Off = true
		s.render(w, r, p, "waves", "Waves", "", page)
		return
	}
	g, err := s.b.Waves(r.Context())
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "plan the waves: "+err.Error())
		return
	}
	page.Waves = g.Waves
	page.Nodes = slices.Clone(g.Nodes)
	slices.SortStableFunc(page.Nodes, func(a, b diagram.Node) int { return blastOf(b) - blastOf(a) })
	if svg, err := g.SVG(r.Context(), ""); err != nil {
		page.SVGError = err.Error()
	} else {
		page.SVG = embeddable(svg)
	}
	s.render(w, r, p, "waves", "Waves", "", page)
}

// blastOf is the number of nodes a node's failure blocks in the wave chain (0 when unknown).
func blastOf(n diagram.Node) int {
	if n.Blast == nil {
		return 0
	}
	return n.Blast.Chain
}

// embeddable is Graphviz's SVG document without its XML prolog and doctype, to embed in the
// page. Graphviz escapes every name and label it writes; the catalog is the platform's own
// repository, and the page's CSP runs no script an SVG could carry.
func embeddable(svg []byte) template.HTML {
	if i := bytes.Index(svg, []byte("<svg")); i >= 0 {
		svg = svg[i:]
	}
	return template.HTML(svg) //nolint:gosec // Graphviz output of the platform's catalog, see above
}
