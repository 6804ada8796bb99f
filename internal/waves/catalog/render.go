package catalog

import (
	"bytes"
	"fmt"
	"strings"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
	"sigs.k8s.io/yaml"
)

// RenderOptions tune Render.
type RenderOptions struct {
	// NoImageAutomation leaves out the Flux image-automation setter markers.
	NoImageAutomation bool
}

// Rendered is one output file.
type Rendered struct {
	// Node is the node the file belongs to (the service or its `-db` node).
	Node string
	// File is the file name, `<svc>.yaml` or `<svc>-db.yaml`.
	File string
	// Data is the file content.
	Data []byte
}

type obj = map[string]any

// Render produces a service's manifests: `<svc>.yaml` always, `<svc>-db.yaml` when it has a
// database. Output is deterministic so it can be compared with golden files.
func Render(s *ServiceDefinition, o RenderOptions) ([]Rendered, error) {
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("render %s: %w", s.Name, err)
	}
	var docs []obj
	if s.NamespaceOrName() == s.Name {
		// A service owns the namespace named after it; a shared namespace is declared elsewhere
		// (rendering it per service would define it twice in a wave).
		docs = append(docs, namespace(s.Name, s.Name))
	}
	for _, v := range s.Storage {
		docs = append(docs, pvc(s, v))
	}
	docs = append(docs, deployment(s))
	if len(s.Ports) > 0 {
		docs = append(docs, service(s))
	}
	if s.Ingress != nil {
		docs = append(docs, ingress(s))
	}
	app, err := marshal(docs, fmt.Sprintf("# %s: rendered from catalog/%s.yaml by `siteops catalog render`.\n", s.Name, s.Name))
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", s.Name, err)
	}
	if s.Image.Policy != "" && !o.NoImageAutomation {
		if app, err = markImage(app, s); err != nil {
			return nil, fmt.Errorf("render %s: image-automation marker: %w", s.Name, err)
		}
	}
	out := []Rendered{{Node: s.Name, File: s.Name + ".yaml", Data: app}}
	if s.Database != nil {
		db := DatabaseNode(s.Name)
		data, err := marshal([]obj{namespace(db, s.Name), cnpgCluster(s)},
			fmt.Sprintf("# %s: CloudNativePG cluster of %s, rendered from catalog/%s.yaml. Its owner secret\n# %s-app is committed SOPS-encrypted as %s-app.sops.yaml.\n", db, s.Name, s.Name, db, db))
		if err != nil {
			return nil, fmt.Errorf("render %s: %w", db, err)
		}
		out = append(out, Rendered{Node: db, File: db + ".yaml", Data: data})
	}
	return out, nil
}

func marshal(docs []obj, head string) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(head)
	for i, d := range docs {
		if i > 0 {
			b.WriteString("---\n")
		}
		y, err := yaml.Marshal(d)
		if err != nil {
			return nil, err
		}
		b.Write(y)
	}
	return b.Bytes(), nil
}

// markImage adds the Flux setter comment to the container image line. Flux image automation
// rewrites exactly the fields carrying `{"$imagepolicy": "<namespace>:<name>"}`.
func markImage(data []byte, s *ServiceDefinition) ([]byte, error) {
	policy := s.Image.Policy
	if !strings.Contains(policy, ":") {
		policy = "flux-system:" + policy
	}
	line := "image: " + image(s) + "\n"
	marked := fmt.Sprintf("image: %s # {\"$imagepolicy\": \"%s\"}\n", image(s), policy)
	if bytes.Count(data, []byte(line)) != 1 {
		return nil, fmt.Errorf("expected one image line %q", strings.TrimSpace(line))
	}
	out := bytes.Replace(data, []byte(line), []byte(marked), 1)
	// The marker must survive a YAML round trip as the image field's line comment.
	for _, doc := range bytes.Split(out, []byte("\n---\n")) {
		n, err := kyaml.Parse(string(doc))
		if err != nil {
			return nil, err
		}
		if n.GetKind() != "Deployment" {
			continue
		}
		img, err := n.Pipe(kyaml.Lookup("spec", "template", "spec", "containers", "[name="+s.Name+"]", "image"))
		if err != nil || img == nil || !strings.Contains(img.YNode().LineComment, "$imagepolicy") {
			return nil, fmt.Errorf("setter marker is not the image field's comment")
		}
	}
	return out, nil
}

func image(s *ServiceDefinition) string { return s.Image.Repository + ":" + s.Image.Tag }

func labels(s *ServiceDefinition) obj {
	return obj{"app.kubernetes.io/name": s.Name, "app.kubernetes.io/part-of": s.Name}
}

func meta(name, ns string, l obj) obj {
	m := obj{"name": name, "labels": l}
	if ns != "" {
		m["namespace"] = ns
	}
	return m
}

func namespace(name, svc string) obj {
	return obj{"apiVersion": "v1", "kind": "Namespace", "metadata": obj{"name": name, "labels": obj{"app.kubernetes.io/part-of": svc}}}
}

func pvc(s *ServiceDefinition, v Volume) obj {
	spec := obj{"accessModes": []any{"ReadWriteOnce"}, "resources": obj{"requests": obj{"storage": v.Size}}}
	if v.StorageClass != "" {
		spec["storageClassName"] = v.StorageClass
	}
	return obj{"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta(s.Name+"-"+v.Name, s.NamespaceOrName(), labels(s)), "spec": spec}
}

func deployment(s *ServiceDefinition) obj {
	c := obj{"name": s.Name, "image": image(s)}
	var ports []any
	for _, p := range s.Ports {
		cp := obj{"name": p.Name, "containerPort": p.ContainerPort}
		if p.Protocol != "" {
			cp["protocol"] = p.Protocol
		}
		ports = append(ports, cp)
	}
	if ports != nil {
		c["ports"] = ports
	}
	var env []any
	for _, e := range s.Env {
		env = append(env, obj{"name": e.Name, "value": e.Value})
	}
	if env != nil {
		c["env"] = env
	}
	if s.BootstrapSecret != nil {
		c["envFrom"] = []any{obj{"secretRef": obj{"name": s.Name + "-bootstrap-secret"}}}
	}
	pod := obj{"containers": []any{c}}
	if len(s.Storage) > 0 {
		var mounts, vols []any
		for _, v := range s.Storage {
			mounts = append(mounts, obj{"name": v.Name, "mountPath": v.MountPath})
			vols = append(vols, obj{"name": v.Name, "persistentVolumeClaim": obj{"claimName": s.Name + "-" + v.Name}})
		}
		c["volumeMounts"] = mounts
		pod["volumes"] = vols
	}
	replicas := int32(1)
	if s.Replicas != nil {
		replicas = *s.Replicas
	}
	spec := obj{
		"replicas": replicas,
		"selector": obj{"matchLabels": obj{"app.kubernetes.io/name": s.Name}},
		"template": obj{"metadata": obj{"labels": labels(s)}, "spec": pod},
	}
	if len(s.Storage) > 0 {
		// ReadWriteOnce volumes cannot be attached to two pods during a rolling update.
		spec["strategy"] = obj{"type": "Recreate"}
	}
	return obj{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(s.Name, s.NamespaceOrName(), labels(s)), "spec": spec}
}

func service(s *ServiceDefinition) obj {
	var ports []any
	for _, p := range s.Ports {
		sp := obj{"name": p.Name, "port": p.ContainerPort, "targetPort": p.Name}
		if p.Protocol != "" {
			sp["protocol"] = p.Protocol
		}
		ports = append(ports, sp)
	}
	return obj{"apiVersion": "v1", "kind": "Service", "metadata": meta(s.Name, s.NamespaceOrName(), labels(s)),
		"spec": obj{"selector": obj{"app.kubernetes.io/name": s.Name}, "ports": ports}}
}

func ingress(s *ServiceDefinition) obj {
	in := s.Ingress
	port := in.Port
	if port == "" {
		port = s.Ports[0].Name
	}
	spec := obj{"rules": []any{obj{"host": in.Host, "http": obj{"paths": []any{obj{
		"path": "/", "pathType": "Prefix",
		"backend": obj{"service": obj{"name": s.Name, "port": obj{"name": port}}},
	}}}}}}
	if in.ClassName != "" {
		spec["ingressClassName"] = in.ClassName
	}
	if in.TLSSecret != "" {
		spec["tls"] = []any{obj{"hosts": []any{in.Host}, "secretName": in.TLSSecret}}
	}
	return obj{"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta(s.Name, s.NamespaceOrName(), labels(s)), "spec": spec}
}

func cnpgCluster(s *ServiceDefinition) obj {
	db := s.Database
	name := DatabaseNode(s.Name)
	instances := db.Instances
	if instances == 0 {
		instances = 1
	}
	database, owner := db.Database, db.Owner
	if database == "" {
		database = s.Name
	}
	if owner == "" {
		owner = s.Name
	}
	spec := obj{
		"instances": instances,
		"storage":   obj{"size": db.Size},
		"bootstrap": obj{"initdb": obj{"database": database, "owner": owner, "secret": obj{"name": name + "-app"}}},
	}
	if db.ImageName != "" {
		spec["imageName"] = db.ImageName
	}
	return obj{"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
		"metadata": meta(name, name, obj{"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": s.Name}), "spec": spec}
}
