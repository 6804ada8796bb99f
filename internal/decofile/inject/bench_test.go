package inject_test

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/siteops/siteops/internal/decofile/inject"
)

// benchService is a Knative Service with a realistic pod template: two containers, a dozen env
// variables, probes and resources.
const benchService = `{"apiVersion":"serving.knative.dev/v1","kind":"Service","metadata":{"name":"shop","namespace":"sites-shop",
"annotations":{"deco.sites/decofile-inject":"default"},"labels":{"app.deco/deploymentId":"shop"}},
"spec":{"template":{"metadata":{"labels":{"app":"shop"},"annotations":{"autoscaling.knative.dev/min-scale":"1"}},
"spec":{"containerConcurrency":80,"timeoutSeconds":300,"containers":[
{"name":"app","image":"ghcr.io/example/site:1","ports":[{"containerPort":8000}],
"env":[{"name":"A","value":"1"},{"name":"B","value":"2"},{"name":"C","value":"3"},{"name":"D","value":"4"},
{"name":"E","value":"5"},{"name":"F","value":"6"},{"name":"G","value":"7"},{"name":"H","value":"8"},
{"name":"I","valueFrom":{"secretKeyRef":{"name":"s","key":"k"}}},{"name":"J","value":"10"}],
"resources":{"requests":{"cpu":"100m","memory":"256Mi"},"limits":{"memory":"1Gi"}},
"readinessProbe":{"httpGet":{"path":"/_healthcheck"},"periodSeconds":5}},
{"name":"proxy","image":"envoy","ports":[{"containerPort":9000}]}]}}}}`

// BenchmarkMutateKnativeService measures the admission work per request besides the API reads:
// decode, read the template, apply the plan, write back, marshal and compute the JSON patch.
func BenchmarkMutateKnativeService(b *testing.B) {
	raw := []byte(benchService)
	plan := configMapPlan()
	b.ReportAllocs()
	for b.Loop() {
		obj := &unstructured.Unstructured{}
		if err := utiljson.Unmarshal(raw, &obj.Object); err != nil {
			b.Fatal(err)
		}
		tpl, err := inject.ReadTemplate(obj)
		if err != nil {
			b.Fatal(err)
		}
		before, _ := inject.ReadTemplate(obj)
		inject.Apply(tpl, plan)
		if err := inject.WriteTemplate(obj, before, tpl); err != nil {
			b.Fatal(err)
		}
		out, err := json.Marshal(obj.Object)
		if err != nil {
			b.Fatal(err)
		}
		if resp := admission.PatchResponseFromRaw(raw, out); len(resp.Patches) == 0 {
			b.Fatal("no patch")
		}
	}
}
