// Package rbac embeds the tenant-facing ClusterRoles that siteops aggregates into the built-in
// admin, edit and view roles, so tests bind tenants to exactly what an installation grants.
package rbac

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"

	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

//go:embed tenant_roles.yaml
var tenantRoles []byte

// TenantRoles decodes the aggregated tenant ClusterRoles (names without the installation's
// prefix).
func TenantRoles() ([]*rbacv1.ClusterRole, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(tenantRoles), 4096)
	var out []*rbacv1.ClusterRole
	for {
		r := &rbacv1.ClusterRole{}
		if err := dec.Decode(r); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("decode embedded tenant_roles.yaml: %w", err)
		}
		if r.Name != "" {
			out = append(out, r)
		}
	}
}
