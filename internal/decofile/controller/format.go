package controller

import (
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/inject"
	"github.com/siteops/siteops/internal/workload"
)

// ReasonFormatSwitched (Warning Event): the content no longer fits the key some workloads'
// DECO_RELEASE names, so it is stored under the other one; those workloads must be re-applied
// (re-admitted by the webhook) before their pods restart.
const ReasonFormatSwitched = "FormatSwitched"

// readers lists, per ConfigMap key (decofile.json, decofile.bin), the workloads of df whose pod
// template's DECO_RELEASE names that file: the ones siteops injected (label deco.sites/decofile
// on the workload) and older ones found by app.deco/deploymentId, as the published operator
// (v0.11) injected them. Running pods load that file whenever they start again, so the key must
// stay. Kinds that are not installed are skipped.
func (r *Reconciler) readers(ctx context.Context, df *decov1.Decofile) (map[string][]string, error) {
	out := map[string][]string{}
	seen := map[string]bool{}
	for _, sel := range []client.MatchingLabels{{decov1.LabelDecofile: df.Name}, {decov1.LabelDeploymentID: df.DeploymentIDOrName()}} {
		ws, err := r.workloads.List(ctx, df.Namespace, sel)
		if err != nil {
			return nil, err
		}
		for i := range ws {
			w := &ws[i]
			id := workload.Name(w)
			if seen[id] {
				continue
			}
			seen[id] = true
			tpl, err := inject.ReadTemplate(w)
			if err != nil {
				continue // not a workload the webhook could have injected
			}
			for _, c := range tpl.Containers {
				for _, e := range c.Env {
					for _, key := range []string{decov1.KeyJSON, decov1.KeyBin} {
						if e.Name == decov1.EnvRelease && strings.HasPrefix(e.Value, "file://") && strings.HasSuffix(e.Value, "/"+key) && !slices.Contains(out[key], id) {
							out[key] = append(out[key], id)
						}
					}
				}
			}
		}
	}
	return out, nil
}

// storedKey is the ConfigMap key the content is under now, the one running pods load: the
// key the ConfigMap holds, else the one the injection webhook points workloads at (the status'
// format; decofile.json before the first delivery). "" when the ConfigMap holds both.
func storedKey(cm *corev1.ConfigMap, df *decov1.Decofile) string {
	if cm != nil {
		_, json := cm.Data[decov1.KeyJSON]
		_, bin := cm.Data[decov1.KeyBin]
		switch {
		case json && bin:
			return ""
		case json:
			return decov1.KeyJSON
		case bin:
			return decov1.KeyBin
		}
	}
	return keyOf(df.Status.Format)
}

// keepReadKey re-encodes res under the key the workloads read when res would move the content
// to the other one: .bin stays .bin (it always fits when the JSON does), .json stays .json while
// it fits the ConfigMap. When the JSON no longer fits, res stands and the workloads reading
// decofile.json are returned, to be told. Workloads reading both keys keep res.
func keepReadKey(res *encode.Result, merged []byte, readers map[string][]string, o encode.Options) (*encode.Result, []string, error) {
	other := decov1.KeyBin
	if res.Format == decov1.FormatBin {
		other = decov1.KeyJSON
	}
	if len(readers[other]) == 0 || len(readers[res.Key]) > 0 {
		return res, nil, nil
	}
	limit := o.Limit
	if limit <= 0 {
		limit = encode.ConfigMapLimit
	}
	if other == decov1.KeyJSON {
		if !encode.Fits(len(merged), limit) {
			return res, readers[other], nil
		}
		return &encode.Result{Format: decov1.FormatJSON, Key: decov1.KeyJSON, Data: string(merged), RawBytes: len(merged)}, nil, nil
	}
	data, err := encode.Compress(merged, encode.DefaultLevels[0])
	if err != nil {
		return nil, nil, err
	}
	if !encode.Fits(len(data), limit) {
		return res, nil, nil // cannot happen for content whose JSON fits; keep the JSON
	}
	return &encode.Result{Format: decov1.FormatBin, Key: decov1.KeyBin, Data: data, RawBytes: len(merged), Level: encode.DefaultLevels[0], Attempts: 1}, nil, nil
}
