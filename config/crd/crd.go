// Package crd embeds the CustomResourceDefinitions generated from api/ so the manager, the CLI's
// local control plane and the tests install exactly what `make manifests` produced.
package crd

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

//go:embed bases/*.yaml
var bases embed.FS

// CRDs decodes every embedded CustomResourceDefinition, ordered by file name.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	names, err := fs.Glob(bases, "bases/*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(names))
	for _, name := range names {
		data, err := bases.ReadFile(name)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return nil, fmt.Errorf("decode embedded CRD %s: %w", name, err)
		}
		out = append(out, crd)
	}
	return out, nil
}
