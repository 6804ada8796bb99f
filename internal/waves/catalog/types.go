// Package catalog reads, validates and renders ServiceDefinition files, the catalog a homelab or
// platform repository keeps under catalog/ and from which waves are computed.
package catalog

// APIVersion is the apiVersion of catalog documents.
const APIVersion = "catalog.siteops.dev/v1alpha1"

// Kinds of catalog documents.
const (
	KindServiceDefinition = "ServiceDefinition"
	KindExtraUnits        = "ExtraUnits"
)

// ServiceDefinition describes one service of the app tier.
type ServiceDefinition struct {
	// APIVersion must be APIVersion.
	APIVersion string `json:"apiVersion"`
	// Kind must be KindServiceDefinition.
	Kind string `json:"kind"`
	// Name is the service (and node) name, a DNS-1123 label.
	Name string `json:"name"`
	// Namespace defaults to Name.
	Namespace string `json:"namespace,omitempty"`
	// Image is the container image.
	Image Image `json:"image"`
	// Replicas defaults to 1.
	Replicas *int32 `json:"replicas,omitempty"`
	// Ports the container listens on; the first is the Service's and the Ingress's default.
	Ports []Port `json:"ports,omitempty"`
	// Env are plain environment variables (values may use Flux ${VAR} substitution).
	Env []EnvVar `json:"env,omitempty"`
	// Storage are persistent volumes, each a PVC mounted into the container.
	Storage []Volume `json:"storage,omitempty"`
	// Ingress exposes the service over HTTP.
	Ingress *Ingress `json:"ingress,omitempty"`
	// Database adds a co-located CloudNativePG cluster, the node `<name>-db`.
	Database *Database `json:"database,omitempty"`
	// BootstrapSecret names keys of the SOPS-encrypted `<name>-bootstrap-secret` Secret that the
	// container reads as environment; the secret file itself is committed encrypted, never rendered.
	BootstrapSecret *BootstrapSecret `json:"bootstrapSecret,omitempty"`
	// Dependencies are the nodes that must be healthy before this service is applied.
	Dependencies []Dependency `json:"dependencies,omitempty"`
}

// Image is a container image with an optional Flux image-automation policy.
type Image struct {
	// Repository, e.g. "ghcr.io/linuxserver/sonarr".
	Repository string `json:"repository"`
	// Tag, e.g. "4.0.14".
	Tag string `json:"tag"`
	// Policy is the Flux ImagePolicy ("namespace:name" or "name" in flux-system) whose setter
	// marker is written next to the image so image automation can bump it.
	Policy string `json:"policy,omitempty"`
}

// Port is a named container port.
type Port struct {
	Name          string `json:"name"`
	ContainerPort int32  `json:"containerPort"`
	// Protocol is TCP (default) or UDP.
	Protocol string `json:"protocol,omitempty"`
}

// EnvVar is a plain environment variable.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Volume is a persistent volume claim mounted into the container.
type Volume struct {
	Name      string `json:"name"`
	Size      string `json:"size"`
	MountPath string `json:"mountPath"`
	// StorageClass is optional (the cluster default otherwise).
	StorageClass string `json:"storageClass,omitempty"`
}

// Ingress exposes the service.
type Ingress struct {
	// Host, e.g. "sonarr.${CLUSTER_DOMAIN}".
	Host string `json:"host"`
	// Port names a port of Ports; the first port by default.
	Port string `json:"port,omitempty"`
	// ClassName is the IngressClass.
	ClassName string `json:"className,omitempty"`
	// TLSSecret enables TLS with this secret.
	TLSSecret string `json:"tlsSecret,omitempty"`
}

// Database is a co-located CloudNativePG cluster.
type Database struct {
	// Instances defaults to 1.
	Instances int32 `json:"instances,omitempty"`
	// Size of each instance's volume, e.g. "5Gi".
	Size string `json:"size"`
	// ImageName optionally pins the PostgreSQL image.
	ImageName string `json:"imageName,omitempty"`
	// Database and Owner of the initdb bootstrap; both default to the service name. The owner's
	// credentials are the SOPS-encrypted `<name>-db-app` Secret.
	Database string `json:"database,omitempty"`
	Owner    string `json:"owner,omitempty"`
}

// BootstrapSecret lists the keys the service reads from `<name>-bootstrap-secret`.
type BootstrapSecret struct {
	Keys []string `json:"keys"`
}

// Dependency is an edge to another node.
type Dependency struct {
	// To is a service name or a `<svc>-db` database node.
	To string `json:"to"`
}

// ExtraUnits is the catalog document listing app-tier units without a service definition.
type ExtraUnits struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Units      []ExtraUnit `json:"units"`
}

// ExtraUnit is a set of app files placed relative to an anchor node.
type ExtraUnit struct {
	// Name of the unit (a node name).
	Name string `json:"name"`
	// Files are the unit's file names under apps/.
	Files []string `json:"files"`
	// Anchor is the node the unit is placed by.
	Anchor string `json:"anchor"`
	// Above puts the unit one wave above the anchor (it needs the anchor healthy first).
	Above bool `json:"above,omitempty"`
	// NonGating gives the unit its own Flux Kustomization that depends on its anchor's wave but
	// that no wave depends on, so a flaky unit does not block later waves.
	NonGating bool `json:"nonGating,omitempty"`
}

// DatabaseNode is the node name of a service's co-located database.
func DatabaseNode(service string) string { return service + "-db" }

// NamespaceOrName returns the service's namespace.
func (s *ServiceDefinition) NamespaceOrName() string {
	if s.Namespace != "" {
		return s.Namespace
	}
	return s.Name
}
