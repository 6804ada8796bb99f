package catalog

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/siteops/siteops/internal/waves/graph"
)

// Catalog is every document of a catalog folder.
type Catalog struct {
	// Services by name.
	Services map[string]*ServiceDefinition
	// Files maps a service name to the file that defined it.
	Files map[string]string
	// Units are the extra units, in file order.
	Units []ExtraUnit
	// UnitFiles maps a unit name to the file that listed it.
	UnitFiles map[string]string
}

type header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// LoadDir reads every *.yaml/*.yml file of dir (not recursive) on fsys.
func LoadDir(fsys filesys.FileSystem, dir string) (*Catalog, error) {
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read catalog folder %s: %w", dir, err)
	}
	sort.Strings(names)
	c := &Catalog{Services: map[string]*ServiceDefinition{}, Files: map[string]string{}, UnitFiles: map[string]string{}}
	var errs []error
	for _, n := range names {
		if !strings.HasSuffix(n, ".yaml") && !strings.HasSuffix(n, ".yml") {
			continue
		}
		p := path.Join(dir, n)
		if fsys.IsDir(p) {
			continue
		}
		data, err := fsys.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		if err := c.add(p, data); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, c.Validate()
}

// add decodes one file (which may hold several documents).
func (c *Catalog) add(file string, data []byte) error {
	rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: split YAML documents: %w", file, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var h header
		if err := yaml.Unmarshal(doc, &h); err != nil {
			return fmt.Errorf("%s: document %d is not YAML: %w", file, i+1, err)
		}
		if h == (header{}) {
			var m map[string]any
			if yaml.Unmarshal(doc, &m) == nil && len(m) == 0 {
				continue // only comments
			}
		}
		if h.APIVersion != APIVersion {
			return fmt.Errorf("%s: document %d has apiVersion %q, want %q", file, i+1, h.APIVersion, APIVersion)
		}
		switch h.Kind {
		case KindServiceDefinition:
			sd := &ServiceDefinition{}
			if err := yaml.UnmarshalStrict(doc, sd); err != nil {
				return fmt.Errorf("%s: invalid ServiceDefinition: %w", file, err)
			}
			if prev, ok := c.Files[sd.Name]; ok {
				return fmt.Errorf("%s: service %q is already defined in %s", file, sd.Name, prev)
			}
			c.Services[sd.Name], c.Files[sd.Name] = sd, file
		case KindExtraUnits:
			var eu ExtraUnits
			if err := yaml.UnmarshalStrict(doc, &eu); err != nil {
				return fmt.Errorf("%s: invalid ExtraUnits: %w", file, err)
			}
			for _, u := range eu.Units {
				c.UnitFiles[u.Name] = file
			}
			c.Units = append(c.Units, eu.Units...)
		default:
			return fmt.Errorf("%s: document %d has kind %q, want %s or %s", file, i+1, h.Kind, KindServiceDefinition, KindExtraUnits)
		}
	}
}

// ParseServiceDefinition decodes and validates a single ServiceDefinition.
func ParseServiceDefinition(data []byte) (*ServiceDefinition, error) {
	sd := &ServiceDefinition{}
	if err := yaml.UnmarshalStrict(data, sd); err != nil {
		return nil, fmt.Errorf("invalid ServiceDefinition: %w", err)
	}
	if sd.APIVersion != APIVersion || sd.Kind != KindServiceDefinition {
		return nil, fmt.Errorf("not a ServiceDefinition: apiVersion %q kind %q (want %s %s)", sd.APIVersion, sd.Kind, APIVersion, KindServiceDefinition)
	}
	return sd, sd.Validate()
}

// Validate checks every service and unit and the names they share.
func (c *Catalog) Validate() error {
	var errs []error
	for _, name := range c.ServiceNames() {
		if err := c.Services[name].Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.Files[name], err))
		}
	}
	seen := map[string]bool{}
	for _, u := range c.Units {
		if err := u.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.UnitFiles[u.Name], err))
		}
		if c.Services[u.Name] != nil || seen[u.Name] {
			errs = append(errs, fmt.Errorf("%s: extra unit %q: the name is already used by a service or unit", c.UnitFiles[u.Name], u.Name))
		}
		seen[u.Name] = true
	}
	return errors.Join(errs...)
}

// Validate checks a service definition.
func (s *ServiceDefinition) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	label := func(field, v string) {
		if msgs := validation.IsDNS1123Label(v); len(msgs) > 0 {
			bad("%s %q: %s", field, v, strings.Join(msgs, "; "))
		}
	}
	if s.Kind != KindServiceDefinition {
		bad("kind %q, want %s", s.Kind, KindServiceDefinition)
	}
	label("name", s.Name)
	if s.Namespace != "" {
		label("namespace", s.Namespace)
	}
	if s.Image.Repository == "" || s.Image.Tag == "" {
		bad("image: repository and tag are required")
	}
	ports := map[string]bool{}
	for _, p := range s.Ports {
		if msgs := validation.IsValidPortName(p.Name); len(msgs) > 0 {
			bad("port name %q: %s", p.Name, strings.Join(msgs, "; "))
		}
		if p.ContainerPort < 1 || p.ContainerPort > 65535 {
			bad("port %s: containerPort %d is outside 1-65535", p.Name, p.ContainerPort)
		}
		if p.Protocol != "" && p.Protocol != "TCP" && p.Protocol != "UDP" {
			bad("port %s: protocol %q, want TCP or UDP", p.Name, p.Protocol)
		}
		ports[p.Name] = true
	}
	for _, e := range s.Env {
		if msgs := validation.IsEnvVarName(e.Name); len(msgs) > 0 {
			bad("env %q: %s", e.Name, strings.Join(msgs, "; "))
		}
	}
	for _, v := range s.Storage {
		label("storage name", v.Name)
		if _, err := resource.ParseQuantity(v.Size); err != nil {
			bad("storage %s: size %q: %v", v.Name, v.Size, err)
		}
		if !strings.HasPrefix(v.MountPath, "/") {
			bad("storage %s: mountPath %q must be absolute", v.Name, v.MountPath)
		}
	}
	if in := s.Ingress; in != nil {
		if in.Host == "" {
			bad("ingress: host is required")
		}
		if len(s.Ports) == 0 {
			bad("ingress needs at least one port")
		}
		if in.Port != "" && !ports[in.Port] {
			bad("ingress: port %q is not one of the service's ports", in.Port)
		}
	}
	if db := s.Database; db != nil {
		if _, err := resource.ParseQuantity(db.Size); err != nil {
			bad("database: size %q: %v", db.Size, err)
		}
		if db.Instances < 0 {
			bad("database: instances must not be negative")
		}
	}
	if b := s.BootstrapSecret; b != nil && len(b.Keys) == 0 {
		bad("bootstrapSecret: list at least one key")
	}
	deps := map[string]bool{}
	for _, d := range s.Dependencies {
		switch {
		case d.To == "":
			bad("dependencies: an entry has no `to`")
		case d.To == s.Name:
			bad("dependencies: %s depends on itself", s.Name)
		case deps[d.To]:
			bad("dependencies: %s is listed twice", d.To)
		}
		deps[d.To] = true
	}
	return errors.Join(errs...)
}

// Validate checks an extra unit.
func (u *ExtraUnit) Validate() error {
	var errs []error
	if msgs := validation.IsDNS1123Label(u.Name); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("extra unit name %q: %s", u.Name, strings.Join(msgs, "; ")))
	}
	if u.Anchor == "" {
		errs = append(errs, fmt.Errorf("extra unit %s: anchor is required", u.Name))
	}
	if len(u.Files) == 0 {
		errs = append(errs, fmt.Errorf("extra unit %s: list its files", u.Name))
	}
	for _, f := range u.Files {
		if f != path.Base(f) || !strings.HasSuffix(f, ".yaml") {
			errs = append(errs, fmt.Errorf("extra unit %s: file %q must be a plain *.yaml file name", u.Name, f))
		}
	}
	return errors.Join(errs...)
}

// ServiceNames returns the service names, sorted.
func (c *Catalog) ServiceNames() []string {
	out := make([]string, 0, len(c.Services))
	for n := range c.Services {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// GraphInput turns the catalog into wave-computation input. A service with a database depends
// on its `<name>-db` node even when it does not list it, because it cannot start without it.
func (c *Catalog) GraphInput() graph.Input {
	in := graph.Input{Services: make([]graph.Service, 0, len(c.Services))}
	for _, name := range c.ServiceNames() {
		s := c.Services[name]
		deps := make([]string, 0, len(s.Dependencies)+1)
		for _, d := range s.Dependencies {
			deps = append(deps, d.To)
		}
		if s.Database != nil {
			db := DatabaseNode(s.Name)
			found := false
			for _, d := range deps {
				found = found || d == db
			}
			if !found {
				deps = append(deps, db)
			}
		}
		in.Services = append(in.Services, graph.Service{Name: name, DependsOn: deps})
	}
	for _, u := range c.Units {
		in.Units = append(in.Units, graph.Unit{Name: u.Name, Anchor: u.Anchor, Above: u.Above})
	}
	return in
}

// Waves computes the catalog's waves.
func (c *Catalog) Waves() (*graph.Waves, error) { return graph.Compute(c.GraphInput()) }
