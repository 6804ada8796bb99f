package rollout_test

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/testenv"
)

func steps(v ...any) []intstr.IntOrString {
	var out []intstr.IntOrString
	for _, s := range v {
		switch s := s.(type) {
		case int:
			out = append(out, intstr.FromInt32(int32(s)))
		case string:
			out = append(out, intstr.FromString(s))
		}
	}
	return out
}

// TestRolloutSpecValidation: the API server refuses, from a tenant, steps that do not increase,
// exceed 100% or are empty, and a check path that names anything but a path on the pod.
func TestRolloutSpecValidation(t *testing.T) {
	c := testenv.APIServer(t)
	tenant := c.Tenant(t, "rollout-spec", nil)
	create := func(name string, ro *decov1alpha1.RolloutSpec) error {
		df := &decov1alpha1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tenant.Namespace},
			Spec: decov1alpha1.DecofileSpec{Source: decov1alpha1.SourceGitHub, Rollout: ro,
				GitHub: &decov1alpha1.GitHubSource{Org: "acme", Repo: "site", Commit: "main"}}}
		return tenant.Client.Create(context.Background(), df)
	}
	check := func(path string) *decov1alpha1.RolloutCheck { return &decov1alpha1.RolloutCheck{Path: path} }
	bad := map[string]*decov1alpha1.RolloutSpec{
		"no steps":               {},
		"empty steps":            {Steps: steps()},
		"zero pods":              {Steps: steps(0, "100%")},
		"above 100%":             {Steps: steps(1, "150%")},
		"0%":                     {Steps: steps("0%")},
		"decreasing percents":    {Steps: steps("50%", "10%")},
		"repeated percent":       {Steps: steps("10%", "10%", "100%")},
		"decreasing counts":      {Steps: steps(5, 2, "100%")},
		"count after percent":    {Steps: steps("10%", 5)},
		"not a step":             {Steps: steps("half")},
		"pause above 10m":        {Steps: steps(1), Pause: &metav1.Duration{Duration: 11 * 60e9}},
		"check URL":              {Steps: steps(1), Check: check("http://169.254.169.254/latest/meta-data")},
		"check host-relative":    {Steps: steps(1), Check: check("//metadata.google.internal/computeMetadata")},
		"check relative":         {Steps: steps(1), Check: check("healthz")},
		"check with query":       {Steps: steps(1), Check: check("/healthz?redirect=http://x")},
		"check dot-dot":          {Steps: steps(1), Check: check("/a/../../admin")},
		"check with userinfo":    {Steps: steps(1), Check: check("/@evil.example/")},
		"check with backslash":   {Steps: steps(1), Check: check(`/\evil.example`)},
		"check status below 200": {Steps: steps(1), Check: &decov1alpha1.RolloutCheck{Path: "/ok", ExpectedStatus: 100}},
	}
	for name, ro := range bad {
		if err := create("bad", ro); !apierrors.IsInvalid(err) {
			t.Errorf("%s: created or wrong error: %v", name, err)
		}
	}
	good := map[string]*decov1alpha1.RolloutSpec{
		"ok-1": {Steps: steps(1, "10%", "50%", "100%"), Pause: &metav1.Duration{Duration: 30e9}, Check: check("/_healthz")},
		"ok-2": {Steps: steps(1, 5, "25%")},
		"ok-3": {Steps: steps("100%"), Check: &decov1alpha1.RolloutCheck{Path: "/products/shoe-1;v=2", ExpectedStatus: 204}},
	}
	for name, ro := range good {
		if err := create(name, ro); err != nil {
			t.Errorf("%s refused: %v", name, err)
		}
	}
}
