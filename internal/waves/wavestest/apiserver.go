package wavestest

import (
	"os"
	"testing"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// kustomizeControllerModule is the controller release matching the Flux API package in go.mod;
// its Kustomization CRD validates what the planner emits and what the tests create.
const kustomizeControllerModule = "github.com/fluxcd/kustomize-controller@v1.9.6"

// crdErr keeps why the CRD could not be fetched, for Cluster to report in the test that needs it.
var crdErr error

// Main runs a package's tests with an API server that serves Flux's Kustomization CRD (fetched
// into the module cache, go.mod untouched) and the CRDs under extraCRDs.
func Main(m *testing.M, extraCRDs ...string) {
	var opts servers.APIServerOptions
	if !short() {
		crd, err := servers.ModuleFile(kustomizeControllerModule, "config/crd/bases/kustomize.toolkit.fluxcd.io_kustomizations.yaml")
		if err != nil {
			crdErr = err
		} else {
			opts.ExtraCRDPaths = append([]string{crd}, extraCRDs...)
		}
	}
	testenv.Main(m, opts)
}

// Cluster returns the API server Main started; it skips the test in -short mode.
func Cluster(t testing.TB) *testenv.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a kube-apiserver")
	}
	if crdErr != nil {
		t.Fatalf("fetch the Flux Kustomization CRD: %v", crdErr)
	}
	return testenv.APIServer(t)
}

// short reads -test.short before flag parsing, which TestMain runs ahead of.
func short() bool {
	for _, a := range os.Args[1:] {
		if a == "-test.short" || a == "-test.short=true" {
			return true
		}
	}
	return false
}
