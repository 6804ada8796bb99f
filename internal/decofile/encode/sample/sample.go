// Package sample generates deterministic, realistic Decofiles for benchmarks and tests: pages and
// sections with the nested objects, repeated keys and long HTML strings of real Deco sites.
package sample

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

// Options sizes a generated Decofile.
type Options struct {
	// Seed makes the output reproducible; the same Options always give the same bytes.
	Seed uint64
	// Blocks is the number of blocks (files); default 360.
	Blocks int
	// TargetBytes is the approximate size of the merged JSON; default 4.2 MB.
	TargetBytes int
	// Paragraphs is the size of the shared paragraph pool; fewer means more repetition and a
	// better compression ratio. Default 400.
	Paragraphs int
}

// Standard is the reference input of the benchmarks: 360 blocks, about 4.2 MB merged.
var Standard = Options{Seed: 42, Blocks: 360, TargetBytes: 3_880_000, Paragraphs: 400}

var words = strings.Fields(`produto oferta frete grátis entrega rápida coleção verão inverno camisa
vestido calça tênis sandália bolsa acessório desconto cupom promoção lançamento exclusivo loja
online compra segura parcelamento cartão pix boleto troca devolução tamanho cor azul preto branco
vermelho verde rosa bege algodão linho couro sustentável conforto estilo elegância qualidade
novidade tendência moda feminina masculina infantil casa decoração cozinha banho jardim presente
aniversário natal black friday outlet liquidação estoque limitado últimas unidades confira agora
aproveite garanta o seu the best quality fast shipping free returns size guide new arrivals
sale collection summer winter shop now learn more details reviews rating stars customers love`)

var sectionTypes = []string{
	"site/sections/Hero/HeroBanner.tsx", "site/sections/Product/ProductShelf.tsx",
	"site/sections/Content/RichText.tsx", "site/sections/Images/Carousel.tsx",
	"site/sections/Newsletter/Newsletter.tsx", "site/sections/Content/Faq.tsx",
	"site/sections/Campaign/CampaignTimer.tsx", "website/sections/Seo/SeoV2.tsx",
}

// Generate returns the block files of a Decofile: file name (as stored in a repository, with
// URL-encoded characters and a .json suffix) → JSON content.
func Generate(o Options) map[string][]byte {
	if o.Blocks <= 0 {
		o.Blocks = 360
	}
	if o.TargetBytes <= 0 {
		o.TargetBytes = 4_200_000
	}
	if o.Paragraphs <= 0 {
		o.Paragraphs = 400
	}
	r := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	pool := make([]string, o.Paragraphs)
	for i := range pool {
		pool[i] = paragraph(r)
	}
	perBlock := o.TargetBytes / o.Blocks
	files := make(map[string][]byte, o.Blocks)
	for i := range o.Blocks {
		name, block := makeBlock(r, pool, i, perBlock)
		// Written like the site admin writes them (JavaScript's JSON.stringify): no HTML escaping.
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(block); err != nil {
			panic(fmt.Sprintf("sample: marshal block: %v", err)) // only plain maps and strings: cannot happen
		}
		files[name+".json"] = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	}
	return files
}

func paragraph(r *rand.Rand) string {
	var b strings.Builder
	n := 25 + r.IntN(60)
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		w := words[r.IntN(len(words))]
		switch r.IntN(14) {
		case 0:
			fmt.Fprintf(&b, `<strong>%s</strong>`, w)
		case 1:
			fmt.Fprintf(&b, `<a href="/%s?utm_source=site&amp;ref=%d">%s</a>`, w, r.IntN(1000), w)
		default:
			b.WriteString(w)
		}
	}
	return "<p>" + b.String() + ".</p>"
}

func makeBlock(r *rand.Rand, pool []string, i, size int) (string, map[string]any) {
	var name string
	switch i % 6 {
	case 0:
		name = fmt.Sprintf("pages-Home%%20%d-%06d", i, r.IntN(1_000_000))
	case 1:
		name = fmt.Sprintf("Campaign%%20Timer%%20-%%20%02d", i)
	case 2:
		name = fmt.Sprintf("pages-produto+%d", i)
	default:
		name = fmt.Sprintf("Section-%d-%s", i, words[r.IntN(len(words))])
	}
	block := map[string]any{
		"__resolveType": "website/pages/Page.tsx",
		"name":          strings.ReplaceAll(name, "%20", " "),
		"path":          fmt.Sprintf("/%s/%d", words[r.IntN(len(words))], i),
		"seo": map[string]any{
			"__resolveType": "website/sections/Seo/SeoV2.tsx",
			"title":         words[r.IntN(len(words))] + " | Loja",
			"description":   pool[r.IntN(len(pool))],
			"noIndexing":    r.IntN(2) == 0,
		},
	}
	var sections []any
	used := 300
	for used < size {
		html := ""
		for range 1 + r.IntN(4) {
			html += pool[r.IntN(len(pool))]
		}
		s := map[string]any{
			"__resolveType": sectionTypes[r.IntN(len(sectionTypes))],
			"title":         words[r.IntN(len(words))],
			"html":          html,
			"image": map[string]any{
				"src":    fmt.Sprintf("https://assets.example.com/%d/%d.webp", r.IntN(100), r.IntN(100000)),
				"alt":    words[r.IntN(len(words))],
				"width":  640 + 8*r.IntN(100),
				"height": 480,
			},
			"cta": map[string]any{"label": "Compre agora", "href": "/ofertas?cupom=" + words[r.IntN(len(words))]},
		}
		sections = append(sections, s)
		used += len(html) + 400
	}
	block["sections"] = sections
	return name, block
}
