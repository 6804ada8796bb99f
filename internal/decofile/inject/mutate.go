package inject

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// VolumeName is the name of the pod volume the webhook adds for the Decofile ConfigMap. The
// webhook recognises its own volume (and mounts of it) by this name when it re-admits or strips
// a workload.
const VolumeName = "decofile"

// Template is the part of a pod template the webhook reads and changes. It is the same for a
// Deployment, a StatefulSet and a Knative Service, so the mutation is written once.
type Template struct {
	// Labels are the pod template's labels.
	Labels map[string]string
	// Volumes are the pod's volumes.
	Volumes []corev1.Volume
	// Containers are the pod's containers; only Name, Env, EnvFrom and VolumeMounts are used.
	Containers []corev1.Container
}

// Plan is what to inject, decided from the workload's annotations, its namespace and the Decofile.
type Plan struct {
	// Decofile is the Decofile's name; empty means no Decofile is injected (valkey only).
	Decofile string
	// DeploymentID is the Decofile's deploymentId (or name), set as the compatibility label.
	DeploymentID string
	// Target is where pods load the content from.
	Target decov1.TargetType
	// ConfigMap is the ConfigMap mounted for the configmap target.
	ConfigMap string
	// Format decides the file name DECO_RELEASE points to for the configmap target.
	Format decov1.Format
	// MountPath is where the ConfigMap is mounted.
	MountPath string
	// S3URL is the object URL for the s3 target; empty when S3 is not configured.
	S3URL string
	// S3Host is the host merged into DECO_ALLOWED_AUTHORITIES for the s3 target.
	S3Host string
	// ReloadSecret holds the reload token under decov1.ReloadTokenKey.
	ReloadSecret string
	// Container names the container that receives env and mount; empty picks "app", else the first.
	Container string
	// ValkeyACL adds envFrom the valkey-acl Secret (optional).
	ValkeyACL bool
}

// Apply changes t to carry what p asks for and returns warnings for the user. It is idempotent:
// applying the same plan to its own result changes nothing. Existing entries that already mean
// the same thing (e.g. a ConfigMap volume the API server filled with defaults) are kept as they
// are, so re-admitting an object never changes its template.
func Apply(t *Template, p Plan) []string {
	var warnings []string
	c, w := pickContainer(t.Containers, p.Container)
	warnings = append(warnings, w...)
	if c == nil {
		return append(warnings, "the pod template has no containers: nothing injected")
	}

	if p.Decofile != "" {
		if t.Labels == nil {
			t.Labels = map[string]string{}
		}
		t.Labels[decov1.LabelDecofile] = p.Decofile
		if _, ok := t.Labels[decov1.LabelDeploymentID]; !ok && p.DeploymentID != "" {
			t.Labels[decov1.LabelDeploymentID] = p.DeploymentID
		}

		switch p.Target {
		case decov1.TargetS3:
			// The S3 target loads over HTTPS: a mount left from the configmap target would keep
			// pods waiting for a ConfigMap that is no longer written.
			removeVolume(t)
			if p.S3URL == "" {
				warnings = append(warnings, fmt.Sprintf("Decofile %q uses target s3 but the operator has no S3 public host configured: %s not set", p.Decofile, decov1.EnvRelease))
			} else {
				warnings = append(warnings, setRelease(c, p.S3URL)...)
				warnings = append(warnings, mergeAuthorities(c, p.S3Host)...)
			}
		default:
			setVolume(t, p.ConfigMap)
			setMount(c, p.MountPath)
			file := decov1.KeyJSON
			if p.Format == decov1.FormatBin {
				file = decov1.KeyBin
			}
			warnings = append(warnings, setRelease(c, "file://"+strings.TrimRight(p.MountPath, "/")+"/"+file)...)
		}

		tokenEnv := corev1.EnvVar{Name: decov1.EnvReloadToken, ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: p.ReloadSecret},
				Key:                  decov1.ReloadTokenKey,
			},
		}}
		if old, had := setEnv(c, tokenEnv); had && old.Value != "" {
			warnings = append(warnings, fmt.Sprintf("replaced the literal %s of container %q with a reference to Secret %q", decov1.EnvReloadToken, c.Name, p.ReloadSecret))
		}
	}

	if p.ValkeyACL {
		setValkeyEnvFrom(c)
	}
	return warnings
}

// Strip removes what Apply added for a Decofile (volume, mount, DECO_RELEASE, token reference,
// pod label) from t. Used when a workload that was injected no longer asks for injection.
func Strip(t *Template) {
	removeVolume(t)
	delete(t.Labels, decov1.LabelDecofile)
	for i := range t.Containers {
		c := &t.Containers[i]
		c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool {
			switch e.Name {
			case decov1.EnvReloadToken:
				return e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Key == decov1.ReloadTokenKey
			case decov1.EnvRelease:
				return true
			}
			return false
		})
		if len(c.Env) == 0 {
			c.Env = nil
		}
	}
}

// Injected reports whether t carries this webhook's injection of the Decofile name: the reload
// token reference to its Secret is the fingerprint. A label alone is not enough, since users may
// set deco.sites/decofile themselves on workloads they configure by hand.
func Injected(t *Template, name string) bool {
	secret := (&decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: name}}).ReloadSecretName()
	for _, c := range t.Containers {
		for _, e := range c.Env {
			if e.Name == decov1.EnvReloadToken && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil &&
				e.ValueFrom.SecretKeyRef.Name == secret && e.ValueFrom.SecretKeyRef.Key == decov1.ReloadTokenKey {
				return true
			}
		}
	}
	return false
}

// pickContainer finds the container named want, else "app", else the first.
func pickContainer(cs []corev1.Container, want string) (*corev1.Container, []string) {
	var warnings []string
	if want != "" {
		if i := slices.IndexFunc(cs, func(c corev1.Container) bool { return c.Name == want }); i >= 0 {
			return &cs[i], nil
		}
		warnings = append(warnings, fmt.Sprintf("annotation %s names container %q, which the pod template does not have: using the default container", decov1.AnnotationContainer, want))
	}
	if i := slices.IndexFunc(cs, func(c corev1.Container) bool { return c.Name == "app" }); i >= 0 {
		return &cs[i], warnings
	}
	if len(cs) == 0 {
		return nil, warnings
	}
	return &cs[0], warnings
}

func setVolume(t *Template, configMap string) {
	i := slices.IndexFunc(t.Volumes, func(v corev1.Volume) bool { return v.Name == VolumeName })
	if i >= 0 && t.Volumes[i].ConfigMap != nil && t.Volumes[i].ConfigMap.Name == configMap {
		return // keep API-server defaults such as defaultMode
	}
	v := corev1.Volume{Name: VolumeName, VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: configMap}},
	}}
	if i >= 0 {
		t.Volumes[i] = v
		return
	}
	t.Volumes = append(t.Volumes, v)
}

func removeVolume(t *Template) {
	t.Volumes = slices.DeleteFunc(t.Volumes, func(v corev1.Volume) bool { return v.Name == VolumeName })
	if len(t.Volumes) == 0 {
		t.Volumes = nil
	}
	for i := range t.Containers {
		c := &t.Containers[i]
		c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == VolumeName })
		if len(c.VolumeMounts) == 0 {
			c.VolumeMounts = nil
		}
	}
}

func setMount(c *corev1.Container, path string) {
	m := corev1.VolumeMount{Name: VolumeName, MountPath: path, ReadOnly: true}
	i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == VolumeName })
	if i >= 0 {
		if c.VolumeMounts[i].MountPath == path && c.VolumeMounts[i].ReadOnly {
			return
		}
		c.VolumeMounts[i] = m
		return
	}
	c.VolumeMounts = append(c.VolumeMounts, m)
}

// setEnv replaces the variable named like e in place (keeping the order of the list, so an
// unchanged list stays byte-identical) or appends it. It returns the previous variable.
func setEnv(c *corev1.Container, e corev1.EnvVar) (corev1.EnvVar, bool) {
	i := slices.IndexFunc(c.Env, func(x corev1.EnvVar) bool { return x.Name == e.Name })
	if i < 0 {
		c.Env = append(c.Env, e)
		return corev1.EnvVar{}, false
	}
	old := c.Env[i]
	if !equality.Semantic.DeepEqual(old, e) {
		c.Env[i] = e
	}
	return old, true
}

func setRelease(c *corev1.Container, value string) []string {
	old, had := setEnv(c, corev1.EnvVar{Name: decov1.EnvRelease, Value: value})
	if !had || (old.Value == value && old.ValueFrom == nil) {
		return nil
	}
	was := fmt.Sprintf("%q", old.Value)
	if old.ValueFrom != nil {
		was = "a valueFrom reference"
	}
	return []string{fmt.Sprintf("replaced %s=%s of container %q with %q: the Decofile injection sets it", decov1.EnvRelease, was, c.Name, value)}
}

// mergeAuthorities adds host to DECO_ALLOWED_AUTHORITIES, starting from the container's list or,
// when unset, from the runtime's defaults: setting the variable replaces the runtime's list.
func mergeAuthorities(c *corev1.Container, host string) []string {
	i := slices.IndexFunc(c.Env, func(x corev1.EnvVar) bool { return x.Name == decov1.EnvAllowedAuthorities })
	if i >= 0 && c.Env[i].ValueFrom != nil {
		return []string{fmt.Sprintf("%s of container %q comes from a reference and cannot be merged: make sure it contains %q", decov1.EnvAllowedAuthorities, c.Name, host)}
	}
	list := decov1.DefaultAllowedAuthorities
	if i >= 0 {
		list = c.Env[i].Value
	}
	merged := MergeAuthorities(list, host)
	if i >= 0 && merged == c.Env[i].Value {
		return nil
	}
	setEnv(c, corev1.EnvVar{Name: decov1.EnvAllowedAuthorities, Value: merged})
	return nil
}

// MergeAuthorities returns the comma-separated list with host appended unless it is already
// present (compared case-insensitively). Empty items are dropped.
func MergeAuthorities(list, host string) string {
	var items []string
	found := false
	for _, it := range strings.Split(list, ",") {
		it = strings.TrimSpace(it)
		if it == "" {
			continue
		}
		if strings.EqualFold(it, host) {
			found = true
		}
		items = append(items, it)
	}
	if !found && host != "" {
		items = append(items, host)
	}
	return strings.Join(items, ",")
}

func setValkeyEnvFrom(c *corev1.Container) {
	if slices.ContainsFunc(c.EnvFrom, func(e corev1.EnvFromSource) bool {
		return e.SecretRef != nil && e.SecretRef.Name == decov1.ValkeyACLSecretName
	}) {
		return
	}
	optional := true
	c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: decov1.ValkeyACLSecretName},
		Optional:             &optional,
	}})
}
