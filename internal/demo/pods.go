package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/devenv"
	"github.com/siteops/siteops/pkg/siteruntime"
)

// sitePort is where the site runtime listens in a real pod.
const sitePort = 8000

// PodsLine says what the demo's site pods are: real pods on a node, or local processes.
func PodsLine(env *devenv.Env) string {
	if env.Node == nil {
		return "site pods: local site-runtime processes registered as Pods (no real node: run as root after `make node-tools image`)"
	}
	return fmt.Sprintf("site pods: real pods of %s on node %s (kubelet, containerd, runc), pod network %s",
		env.Images[devenv.SiteImage].Ref, env.Node.Name, env.Node.PodCIDR)
}

// siteDeployment is an injection-annotated Deployment of the site runtime: the site image on a
// real node, a placeholder image for the local stand-ins (which no kubelet runs).
func siteDeployment(env *devenv.Env, namespace, name, decofile string, replicas int32, port int) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	c := corev1.Container{Name: "app", Image: "deco-site:demo",
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}}
	if env.Node != nil {
		c.Image, c.ImagePullPolicy = env.Images[devenv.SiteImage].Ref, corev1.PullNever
		c.Args = []string{"--addr", fmt.Sprintf("0.0.0.0:%d", port)}
		c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: siteruntime.InfoPath, Port: intstr.FromInt32(int32(port))}}, PeriodSeconds: 1}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: namespace,
			Annotations: map[string]string{decov1alpha1.AnnotationInject: decofile},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers:                    []corev1.Container{c},
					AutomountServiceAccountToken:  ptr(false),
					TerminationGracePeriodSeconds: ptr(int64(1)),
				},
			},
		},
	}
}

// runningPods waits until the Deployment's pods are want Ready pods with an IP on the node, and
// returns them as site pods at their pod IPs.
func runningPods(ctx context.Context, env *devenv.Env, d *appsv1.Deployment, want int) ([]*sitePod, error) {
	var pods []*sitePod
	err := waitFor(ctx, 2*time.Minute, func() error {
		var list corev1.PodList
		if err := env.Client.List(ctx, &list, client.InNamespace(d.Namespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
			return err
		}
		pods = pods[:0]
		var waiting []string
		for _, p := range list.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || !podReady(&p) {
				waiting = append(waiting, fmt.Sprintf("%s %s", p.Name, p.Status.Phase))
				continue
			}
			pods = append(pods, &sitePod{name: p.Name, addr: net.JoinHostPort(p.Status.PodIP, fmt.Sprint(sitePort)), node: p.Spec.NodeName})
		}
		if len(pods) != want {
			return fmt.Errorf("%d of %d pods of %s ready (waiting: %s)", len(pods), want, d.Name, strings.Join(waiting, ", "))
		}
		return nil
	})
	return pods, err
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// info asks the pod's site runtime what it serves (GET /.decofile).
func (p *sitePod) info(ctx context.Context) (siteruntime.Info, error) {
	var info siteruntime.Info
	body, err := p.get(ctx, siteruntime.InfoPath)
	if err != nil {
		return info, err
	}
	if err := json.Unmarshal(body, &info); err != nil {
		return info, fmt.Errorf("pod %s: GET %s: %w", p.name, siteruntime.InfoPath, err)
	}
	return info, nil
}

// content is the Decofile JSON the pod serves (GET /.decofile?content=true).
func (p *sitePod) content(ctx context.Context) (string, error) {
	body, err := p.get(ctx, siteruntime.InfoPath+"?content=true")
	return string(body), err
}

func (p *sitePod) get(ctx context.Context, path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", p.name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, siteruntime.MaxDecofileBytes))
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("pod %s: GET %s: %s %w", p.name, path, resp.Status, err)
	}
	return body, nil
}

// coldStart shows a site starting from the s3 target's object: a Deployment of one pod,
// injected while the Decofile targets s3, must load DECO_RELEASE (the object's URL) at start.
// On a node that is a real pod; without one a site runtime starts here from the injected
// environment. It returns the URL the pod loaded and the content it serves.
func (s *site) coldStart(ctx context.Context, env *devenv.Env) (release, content string, err error) {
	d := siteDeployment(env, s.namespace, s.name+"-cold", s.name, 1, sitePort)
	if err := env.Client.Create(ctx, d); err != nil {
		return "", "", fmt.Errorf("create Deployment %s: %w", d.Name, err)
	}
	defer func() {
		_ = env.Client.Delete(context.WithoutCancel(ctx), d, client.PropagationPolicy(metav1.DeletePropagationBackground))
	}()
	app := d.Spec.Template.Spec.Containers[0]
	release = envValue(app, decov1alpha1.EnvRelease)
	if env.Node != nil {
		pods, err := runningPods(ctx, env, d, 1)
		if err != nil {
			return release, "", err
		}
		content, err = pods[0].content(ctx)
		return release, content, err
	}
	rt, err := siteruntime.New(ctx, siteruntime.Options{Release: release,
		AllowedAuthorities: siteruntime.ParseAuthorities(envValue(app, decov1alpha1.EnvAllowedAuthorities))})
	if err != nil {
		return release, "", fmt.Errorf("cold start from %s: %w", release, err)
	}
	return release, string(rt.Current().Decofile), nil
}
