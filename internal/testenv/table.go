package testenv

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TableRows reads path (such as /apis/deco.sites/v1alpha1/namespaces/ns/decofiles) as the API
// server's table, what kubectl prints, with every column (-o wide): a row per object, each cell
// by its column's name.
func (c *Cluster) TableRows(t testing.TB, path string) []map[string]string {
	t.Helper()
	hc, err := rest.HTTPClientFor(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, strings.TrimSuffix(c.Config.Host, "/")+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var table metav1.Table
	if err := json.NewDecoder(resp.Body).Decode(&table); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("read %s as a table: HTTP %d, %v", path, resp.StatusCode, err)
	}
	rows := make([]map[string]string, len(table.Rows))
	for r, row := range table.Rows {
		rows[r] = map[string]string{}
		for i, col := range table.ColumnDefinitions {
			if i < len(row.Cells) && row.Cells[i] != nil {
				rows[r][col.Name] = fmt.Sprint(row.Cells[i])
			}
		}
	}
	return rows
}
