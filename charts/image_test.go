package charts_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestImageReferencesFromOnePlace checks that the chart's default image is
// image.repository:appVersion, that config/ runs the same image, and that `make image` tags its
// images with that version.
func TestImageReferencesFromOnePlace(t *testing.T) {
	c := loadChart(t)
	want := "siteops-manager:" + c.Metadata.AppVersion
	if repo := c.Values["image"].(map[string]any)["repository"]; repo != "siteops-manager" {
		t.Errorf("image.repository = %v, want siteops-manager (the name make image builds)", repo)
	}
	h := render(t, "siteops", namespace, nil)
	if got := h.deployment(t).Spec.Template.Spec.Containers[0].Image; got != want {
		t.Errorf("the chart runs %s, want %s", got, want)
	}
	k := kustomizeBuild(t, "../config/default")
	if got := k.deployment(t).Spec.Template.Spec.Containers[0].Image; got != want {
		t.Errorf("config/default runs %s, want %s (the chart's appVersion)", got, want)
	}
	mk, err := os.ReadFile(filepath.Join("..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^VERSION \?= .*appVersion.*charts/siteops/Chart.yaml`).Match(mk) {
		t.Error("the Makefile does not take the image tag from the chart's appVersion")
	}
}
