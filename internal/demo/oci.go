package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/devenv"
)

// ociSourcedDecofile pushes a folder of blocks as an OCI artifact (as `flux push artifact`
// would) to the local registry and delivers it with a Decofile of source oci.
func ociSourcedDecofile(ns string) func(context.Context, *devenv.Env, io.Writer) (string, error) {
	return func(ctx context.Context, env *devenv.Env, out io.Writer) (string, error) {
		reg := env.Servers.Registry
		digest, err := reg.PushArtifact("sites/landing", "prod", map[string]string{
			"blocks/Hero.json":  `{"title":"Spring sale","cta":"Shop now"}`,
			"blocks/Theme.json": `{"primary":"#0a7"}`,
		})
		if err != nil {
			return "", err
		}
		fmt.Fprintf(out, "    pushed 2 block files as %s\n", reg.URL("sites/landing", "prod"))
		df := &decov1alpha1.Decofile{
			ObjectMeta: metav1.ObjectMeta{Name: "landing", Namespace: ns},
			Spec: decov1alpha1.DecofileSpec{
				Source:   decov1alpha1.SourceOCI,
				OCI:      &decov1alpha1.OCISource{URL: reg.URL("sites/landing", "prod"), Path: "blocks"},
				Interval: &metav1.Duration{Duration: 10 * time.Second},
			},
		}
		if err := env.Client.Create(ctx, df); err != nil {
			return "", fmt.Errorf("create Decofile: %w", err)
		}
		want := "prod@" + digest
		if err := waitFor(ctx, time.Minute, func() error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(df), df); err != nil {
				return err
			}
			if !meta.IsStatusConditionTrue(df.Status.Conditions, decov1alpha1.ConditionReady) || df.Status.Artifact == nil || df.Status.Artifact.Revision != want {
				return fmt.Errorf("decofile not Ready at %s: %+v", want, df.Status.Conditions)
			}
			return nil
		}); err != nil {
			return "", err
		}
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: df.ConfigMapName()}, cm); err != nil {
			return "", fmt.Errorf("read the Decofile's ConfigMap: %w", err)
		}
		var blocks map[string]json.RawMessage
		if err := json.Unmarshal([]byte(cm.Data[decov1alpha1.KeyJSON]), &blocks); err != nil {
			return "", fmt.Errorf("read the blocks in ConfigMap %s: %w", cm.Name, err)
		}
		if len(blocks) != 2 {
			return "", fmt.Errorf("ConfigMap %s holds %d blocks, want Hero and Theme", cm.Name, len(blocks))
		}
		fmt.Fprintf(out, "    status.artifact: revision %s, digest %s, %d bytes\n", df.Status.Artifact.Revision, df.Status.Artifact.Digest, df.Status.Artifact.Size)
		return fmt.Sprintf("Decofile landing Ready at %s, blocks Hero and Theme in ConfigMap %s", want, cm.Name), nil
	}
}
