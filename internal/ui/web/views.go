package web

import (
	"fmt"
	"html/template"
	"net/url"
	"strings"
	"time"

	"github.com/siteops/siteops/internal/inspect"
)

// states are the columns of the overview's counts, what needs attention first.
var states = []inspect.State{inspect.StateFailing, inspect.StateProgressing, inspect.StateSuspended, inspect.StateUnknown, inspect.StateReady}

// kindCount is one row of the overview's counts.
type kindCount struct {
	Kind   string
	Counts []int
	Total  int
}

// countByState counts summaries per state, in the order of states.
func countByState(kind string, ss []inspect.Summary) kindCount {
	kc := kindCount{Kind: kind, Counts: make([]int, len(states)), Total: len(ss)}
	for _, s := range ss {
		for i, st := range states {
			if s.State == st {
				kc.Counts[i]++
			}
		}
	}
	return kc
}

// needingAttention is the summaries that are not Ready, failing first, at most limit of them.
func needingAttention(ss []inspect.Summary, limit int) (out []inspect.Summary, more int) {
	for _, s := range ss {
		if s.State == inspect.StateReady {
			continue
		}
		if len(out) == limit {
			more++
			continue
		}
		out = append(out, s)
	}
	return out, more
}

// rolloutsInProgress is the Decofiles whose rollout to the pods is under way.
func rolloutsInProgress(ss []inspect.Summary) []inspect.Summary {
	var out []inspect.Summary
	for _, s := range ss {
		if s.Kind == inspect.KindDecofile && s.State == inspect.StateProgressing && s.Pods != nil {
			out = append(out, s)
		}
	}
	return out
}

// href is the UI's address of a summarised object.
func href(s inspect.Summary) string {
	ns := url.PathEscape(s.Namespace)
	switch s.Kind {
	case inspect.KindDecofile:
		return "/namespaces/" + ns + "/decofiles/" + url.PathEscape(s.Name)
	case inspect.KindGitTarget:
		return "/namespaces/" + ns + "/gittargets/" + url.PathEscape(s.Name)
	}
	return "/namespaces/" + ns
}

// ago says how long ago t was, as a person reads it.
func ago(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "—"
	}
	d := time.Since(*t).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// stamp is t in UTC for a title attribute.
func stamp(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// pods is "confirmed/total" of a Decofile's rollout.
func pods(p *inspect.Pods) string {
	if p == nil {
		return "—"
	}
	return fmt.Sprintf("%d/%d", p.Confirmed, p.Total)
}

// percent is how much of a rollout is confirmed, for a progress bar.
func percent(p *inspect.Pods) int {
	if p == nil || p.Total == 0 {
		return 0
	}
	return int(100 * p.Confirmed / p.Total)
}

var funcs = template.FuncMap{
	"href":    href,
	"ago":     ago,
	"stamp":   stamp,
	"pods":    pods,
	"percent": percent,
	"lower":   strings.ToLower,
	"states":  func() []inspect.State { return states },
	"timeptr": func(t time.Time) *time.Time { return &t },
	"short":   shortHash,
	"pair": func(title string, rows []changeRow) any {
		return struct {
			Title string
			Rows  []changeRow
		}{title, rows}
	},
}

// parsePages parses each page with the shared layout.
func parsePages() (map[string]*template.Template, error) {
	pages := map[string]*template.Template{}
	for _, name := range []string{"overview", "site", "tenant", "mirror", "target", "waves", "error"} {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("parse the %s page: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}
