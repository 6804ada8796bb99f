// Package inject is the Decofile injection webhook: it mutates the pod template of Knative
// Services, Deployments and StatefulSets annotated deco.sites/decofile-inject so the site runtime
// loads its Decofile at cold start (a mounted ConfigMap or an S3 URL) and accepts reload pushes
// (a stable token from a Secret), and it refuses to delete a Decofile that workloads still use.
package inject

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// S3Config is how pods reach objects of the s3 target. The zero value means S3 is not
// configured: workloads of s3-target Decofiles are admitted with a warning.
type S3Config struct {
	// PublicHost is the host (optionally host:port) serving the bucket over HTTPS to pods.
	PublicHost string
	// Prefix is the key prefix passed to Decofile.S3ObjectKey, shared with the uploader.
	Prefix string
	// Scheme of the object URL: https when empty; http only for a local development server.
	Scheme string
}

// ObjectURL is the URL (https unless Scheme says otherwise) of the Decofile's object, or ""
// when S3 is not configured.
func (c S3Config) ObjectURL(d *decov1.Decofile) string {
	if c.PublicHost == "" {
		return ""
	}
	scheme := c.Scheme
	if scheme == "" {
		scheme = "https"
	}
	u := url.URL{Scheme: scheme, Host: c.PublicHost, Path: "/" + d.S3ObjectKey(c.Prefix)}
	return u.String()
}

// Injector is the mutating admission handler. It answers from the manager's cache and reads the
// API server only for what the cache has not seen yet, one bounded read at a time: a workload is
// often applied in the same breath as its Decofile, and every admission of every tenant waits on
// this fail-closed webhook, so none may read a namespace's content.
type Injector struct {
	// Cache is the manager's cache: Decofiles (without their inline content, see
	// controller.CacheOptions) indexed by IndexDeploymentID, and Secrets' metadata. Nil reads
	// those from Reader (for tests): inject "true" then fails in a namespace of more than four
	// Decofiles, since an admission reads at most four whole.
	Cache client.Reader
	// Reader reads the API server: namespaces, what the cache has not seen yet (metadata first,
	// then single objects), and a Decofile's ConfigMap while its status has no format.
	Reader client.Reader
	// S3 configures the s3 target.
	S3 S3Config

	slotsOnce sync.Once
	slots     chan struct{} // see live
}

var _ admission.Handler = (*Injector)(nil)

// Handle mutates the workload in req. It never denies a request for a missing or unready
// Decofile: it admits with warnings, which kubectl prints, naming what is missing.
func (h *Injector) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	obj := &unstructured.Unstructured{}
	// util/json keeps integers as int64, as unstructured objects expect.
	if err := utiljson.Unmarshal(req.Object.Raw, &obj.Object); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode %s: %w", req.Kind.Kind, err))
	}
	if obj.GetDeletionTimestamp() != nil {
		// Finalizers are being removed; the pods are going away, nothing to inject.
		return admission.Allowed("")
	}
	tpl, err := ReadTemplate(obj)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("%s %s/%s: %w", req.Kind.Kind, req.Namespace, obj.GetName(), err))
	}
	before := copyTemplate(tpl)

	warnings, result, err := h.mutate(ctx, req.Namespace, obj, tpl)
	if err != nil {
		AdmissionsTotal.WithLabelValues(req.Kind.Kind, ResultError).Inc()
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if err := WriteTemplate(obj, before, tpl); err != nil {
		AdmissionsTotal.WithLabelValues(req.Kind.Kind, ResultError).Inc()
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("write pod template: %w", err))
	}
	out, err := json.Marshal(obj.Object)
	if err != nil {
		AdmissionsTotal.WithLabelValues(req.Kind.Kind, ResultError).Inc()
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if len(warnings) > 0 && result == ResultInjected {
		result = ResultWarned
	}
	AdmissionsTotal.WithLabelValues(req.Kind.Kind, result).Inc()
	resp := admission.PatchResponseFromRaw(req.Object.Raw, out)
	resp.Warnings = warnings
	if len(warnings) > 0 {
		logf.FromContext(ctx).Info("admitted with warnings", "kind", req.Kind.Kind, "namespace", req.Namespace, "name", obj.GetName(), "warnings", warnings)
	}
	return resp
}

// mutate decides the plan for obj and applies it to tpl and to obj's own labels. It returns the
// warnings for the user and the result to count.
func (h *Injector) mutate(ctx context.Context, namespace string, obj *unstructured.Unstructured, tpl *Template) ([]string, string, error) {
	ann := obj.GetAnnotations()
	value, wantDecofile := ann[decov1.AnnotationInject]
	value = strings.TrimSpace(value)
	var warnings []string

	ns := &corev1.Namespace{}
	valkey := false
	if err := h.Reader.Get(ctx, types.NamespacedName{Name: namespace}, ns); err != nil {
		warnings = append(warnings, fmt.Sprintf("cannot read namespace %q (%v): valkey-acl injection skipped", namespace, err))
	} else {
		valkey = ns.Annotations[decov1.AnnotationValkeyACL] == "true"
	}
	plan := Plan{ValkeyACL: valkey, Container: ann[decov1.AnnotationContainer]}

	if !wantDecofile {
		result := ResultValkeyOnly
		if name, ok := obj.GetLabels()[decov1.LabelDecofile]; ok && Injected(tpl, name) {
			// Injected before, no longer asked for: remove the injection so the Decofile can go.
			Strip(tpl)
			setObjectLabel(obj, "")
			result = ResultStripped
		}
		if _, ok := ann[decov1.AnnotationValkeyACLInject]; ok {
			warnings = append(warnings, Apply(tpl, plan)...)
		}
		return warnings, result, nil
	}

	d, w, err := h.resolve(ctx, namespace, value, obj, tpl)
	warnings = append(warnings, w...)
	if err != nil {
		return nil, "", err
	}
	if d != nil && !d.TargetOrDefault().Supported() {
		// Served by another operator (tanstack-kv, v0.11): the workload is left exactly as it is.
		return append(warnings, fmt.Sprintf("Decofile %q has spec.target %s, which the published Decofile operator (v0.11) serves, not siteops: nothing injected", d.Name, d.TargetOrDefault())), ResultWarned, nil
	}
	if d == nil {
		// Nothing to inject yet; still give the tenant its cache credentials.
		warnings = append(warnings, Apply(tpl, plan)...)
		return warnings, ResultWarned, nil
	}

	plan.Decofile = d.Name
	plan.DeploymentID = d.DeploymentIDOrName()
	plan.Target = d.TargetOrDefault()
	plan.ReloadSecret = d.ReloadSecretName()
	plan.ConfigMap = d.ConfigMapName()
	plan.MountPath = decov1.DefaultMountPath
	if mp := strings.TrimSpace(ann[decov1.AnnotationMountPath]); mp != "" {
		if !strings.HasPrefix(mp, "/") {
			warnings = append(warnings, fmt.Sprintf("annotation %s=%q is not an absolute path: using %s", decov1.AnnotationMountPath, mp, decov1.DefaultMountPath))
		} else {
			plan.MountPath = mp
		}
	}
	if plan.Target == decov1.TargetS3 {
		plan.S3URL = h.S3.ObjectURL(d)
		plan.S3Host = h.S3.PublicHost
	} else {
		format, w := h.format(ctx, d)
		plan.Format = format
		warnings = append(warnings, w...)
	}
	if c := meta.FindStatusCondition(d.Status.Conditions, decov1.ConditionReady); c != nil && !d.Status.ContentStored() {
		warnings = append(warnings, fmt.Sprintf("Decofile %q is not ready (%s: %s): pods may not find their content until it is", d.Name, c.Reason, c.Message))
	}
	if ok, err := h.secretExists(ctx, namespace, plan.ReloadSecret); err == nil && !ok {
		warnings = append(warnings, fmt.Sprintf("reload Secret %q does not exist yet: pods wait for it; the Decofile controller creates it", plan.ReloadSecret))
	} else if err != nil {
		warnings = append(warnings, fmt.Sprintf("cannot read reload Secret %q: %v", plan.ReloadSecret, err))
	}

	warnings = append(warnings, Apply(tpl, plan)...)
	setObjectLabel(obj, d.Name)
	return warnings, ResultInjected, nil
}

// resolve finds the Decofile the annotation value asks for. A nil Decofile with warnings means
// there is nothing to inject (yet); an error means the API server could not be read.
func (h *Injector) resolve(ctx context.Context, namespace, value string, obj *unstructured.Unstructured, tpl *Template) (*decov1.Decofile, []string, error) {
	name := value
	switch value {
	case "":
		return nil, []string{fmt.Sprintf("annotation %s is empty: use \"true\", \"default\" or a Decofile name; nothing injected", decov1.AnnotationInject)}, nil
	case InjectDefault:
		name = DefaultDecofileName(namespace)
	case InjectByDeploymentID:
		id := obj.GetLabels()[decov1.LabelDeploymentID]
		if id == "" {
			id = tpl.Labels[decov1.LabelDeploymentID]
		}
		if id == "" {
			return nil, []string{fmt.Sprintf("annotation %s=true needs the label %s on the workload to pick the Decofile; nothing injected", decov1.AnnotationInject, decov1.LabelDeploymentID)}, nil
		}
		list, err := h.decofilesWithDeploymentID(ctx, namespace, id)
		if err != nil {
			return nil, nil, err
		}
		d, warnings := ByDeploymentID(list, id)
		if d == nil {
			return nil, []string{fmt.Sprintf("no Decofile in namespace %q has deploymentId %q: nothing injected; create it and re-apply this workload", namespace, id)}, nil
		}
		return d, warnings, nil
	}
	d, err := h.decofileNamed(ctx, namespace, name)
	if err != nil {
		return nil, nil, err
	}
	if d == nil {
		return nil, []string{fmt.Sprintf("Decofile %q not found in namespace %q: nothing injected; create it and re-apply this workload", name, namespace)}, nil
	}
	return d, nil, nil
}

// format is the Decofile's stored format: from its status, else from its ConfigMap's keys (the
// delivery controller may not have written status yet, or a v0.11 ConfigMap was not adopted
// yet), else json with a warning. Only then is the ConfigMap read, once, from the API server.
func (h *Injector) format(ctx context.Context, d *decov1.Decofile) (decov1.Format, []string) {
	if d.Status.Format != "" {
		return d.Status.Format, nil
	}
	cm := &corev1.ConfigMap{}
	err := h.live(ctx, func() error {
		return h.Reader.Get(ctx, types.NamespacedName{Namespace: d.Namespace, Name: d.ConfigMapName()}, cm)
	})
	if err == nil {
		if _, ok := cm.Data[decov1.KeyBin]; ok {
			return decov1.FormatBin, nil
		}
		if _, ok := cm.Data[decov1.KeyJSON]; ok {
			return decov1.FormatJSON, nil
		}
	}
	what := "has no content yet"
	if apierrors.IsNotFound(err) {
		what = fmt.Sprintf("has no ConfigMap %q yet", d.ConfigMapName())
	} else if err != nil {
		what = fmt.Sprintf("could not be checked (%v)", err)
	}
	return decov1.FormatJSON, []string{fmt.Sprintf("Decofile %q %s: %s assumes %s; re-apply this workload if the content is stored as %s", d.Name, what, decov1.EnvRelease, decov1.KeyJSON, decov1.KeyBin)}
}

// setObjectLabel labels the workload itself with the Decofile it uses, so the delete
// protection can find it with a label selector (a Knative Service's pod labels are not
// selectable). Setting it does not change the pod template, so no rollout follows.
func setObjectLabel(obj *unstructured.Unstructured, decofile string) {
	labels := obj.GetLabels()
	if decofile == "" {
		if _, ok := labels[decov1.LabelDecofile]; !ok {
			return
		}
		delete(labels, decov1.LabelDecofile)
	} else {
		if labels[decov1.LabelDecofile] == decofile {
			return
		}
		if labels == nil {
			labels = map[string]string{}
		}
		labels[decov1.LabelDecofile] = decofile
	}
	obj.SetLabels(labels)
}

func copyTemplate(t *Template) *Template {
	c := &Template{}
	if t.Labels != nil {
		c.Labels = make(map[string]string, len(t.Labels))
		for k, v := range t.Labels {
			c.Labels[k] = v
		}
	}
	for _, v := range t.Volumes {
		c.Volumes = append(c.Volumes, *v.DeepCopy())
	}
	for _, ct := range t.Containers {
		c.Containers = append(c.Containers, *ct.DeepCopy())
	}
	return c
}
