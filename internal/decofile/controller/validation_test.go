package controller_test

import (
	"context"
	"testing"

	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// TestSpecValidation: the API server itself refuses specs the controller could not act on.
func TestSpecValidation(t *testing.T) {
	e := start(t)
	ns := e.c.Namespace(t, "valid", nil)
	gh := func(org, repo, path string) *decov1.GitHubSource {
		return &decov1.GitHubSource{Org: org, Repo: repo, Commit: "main", Path: path}
	}
	cases := map[string]decov1.DecofileSpec{
		"github without its block":   {Source: decov1.SourceGitHub, Inline: inline(map[string]string{"a": `1`})},
		"two blocks":                 {Source: decov1.SourceInline, Inline: inline(map[string]string{"a": `1`}), GitHub: gh("acme", "site", "")},
		"org with underscore":        {Source: decov1.SourceGitHub, GitHub: gh("bad_org", "site", "")},
		"org starting with a hyphen": {Source: decov1.SourceGitHub, GitHub: gh("-acme", "site", "")},
		"repo ..":                    {Source: decov1.SourceGitHub, GitHub: gh("acme", "..", "")},
		"repo with a slash":          {Source: decov1.SourceGitHub, GitHub: gh("acme", "a/b", "")},
		"path escaping the repo":     {Source: decov1.SourceGitHub, GitHub: gh("acme", "site", "blocks/../../etc")},
		"unknown source":             {Source: "svn"},
		"unknown target":             {Source: decov1.SourceInline, Inline: inline(map[string]string{"a": `1`}), Target: "disk"},
	}
	for name, spec := range cases {
		df := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{GenerateName: "bad-", Namespace: ns}, Spec: spec}
		err := e.c.Client.Create(context.Background(), df)
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: created or wrong error: %v", name, err)
		}
	}
	ok := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "ok", Namespace: ns},
		Spec: decov1.DecofileSpec{Source: decov1.SourceGitHub, GitHub: gh("Acme-Sites", "site.web_1", "./.deco/blocks..x/")}}
	if err := e.c.Client.Create(context.Background(), ok); err != nil {
		t.Fatalf("a valid spec was refused: %v", err)
	}
}

// TestMetricsRecorded checks that a delivery registers and moves every delivery metric.
func TestMetricsRecorded(t *testing.T) {
	e := start(t)
	ns := e.c.Namespace(t, "metrics", nil)
	org, repo := "acme", "metrics-"+ns
	e.gh.Push(org, repo, "main", map[string]string{".deco/blocks/a.json": `1`})
	df := githubDecofile(ns, org, repo, "main", "")
	e.create(t, df)
	e.waitReady(t, ns, "site", "True", "", nil)
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	find := func(name string, labels map[string]string) *dto.Metric {
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
		next:
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
						continue next
					}
				}
				return m
			}
		}
		return nil
	}
	if m := find("siteops_decofile_reconciles_total", map[string]string{"result": "stored"}); m == nil || m.GetCounter().GetValue() < 1 {
		t.Errorf("reconciles_total{result=stored}: %v", m)
	}
	if m := find("siteops_decofile_github_requests_total", map[string]string{"kind": "archive", "code": "200"}); m == nil || m.GetCounter().GetValue() < 1 {
		t.Errorf("github_requests_total{kind=archive,code=200}: %v", m)
	}
	if m := find("siteops_decofile_raw_bytes", map[string]string{"namespace": ns, "name": "site"}); m == nil || m.GetGauge().GetValue() != float64(len(`{"a":1}`)) {
		t.Errorf("raw_bytes: %v", m)
	}
	for _, name := range []string{"siteops_decofile_source_fetch_duration_seconds", "siteops_decofile_compression_duration_seconds"} {
		if m := find(name, nil); m == nil || m.GetHistogram().GetSampleCount() < 1 {
			t.Errorf("%s has no samples", name)
		}
	}
}
