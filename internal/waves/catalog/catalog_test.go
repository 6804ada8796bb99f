package catalog

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/kyaml/filesys"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const fixture = "../testdata/homelab/catalog"

func readSD(t *testing.T, name string) *ServiceDefinition {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixture, name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sd, err := ParseServiceDefinition(data)
	if err != nil {
		t.Fatal(err)
	}
	return sd
}

func TestRenderGolden(t *testing.T) {
	cases := []struct {
		service string
		opts    RenderOptions
		golden  string
	}{
		{"sonarr", RenderOptions{}, "sonarr"},
		{"nextcloud", RenderOptions{}, "nextcloud"},
		{"pihole", RenderOptions{NoImageAutomation: true}, "pihole-no-image-automation"},
		{"vm-demo", RenderOptions{}, "vm-demo"},
	}
	for _, tc := range cases {
		t.Run(tc.golden, func(t *testing.T) {
			out, err := Render(readSD(t, tc.service), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range out {
				path := filepath.Join("testdata", "golden", tc.golden, f.File)
				if *update {
					if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, f.Data, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run with -update to create it)", err)
				}
				if !bytes.Equal(f.Data, want) {
					t.Errorf("%s differs from %s:\n%s", f.File, path, f.Data)
				}
			}
			entries, _ := os.ReadDir(filepath.Join("testdata", "golden", tc.golden))
			if len(entries) != len(out) {
				t.Errorf("rendered %d files, golden folder has %d", len(out), len(entries))
			}
		})
	}
}

func TestRenderImageMarker(t *testing.T) {
	out, err := Render(readSD(t, "sonarr"), RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out[0].Data), `image: lscr.io/linuxserver/sonarr:4.0.14 # {"$imagepolicy": "flux-system:sonarr"}`) {
		t.Fatalf("no setter marker:\n%s", out[0].Data)
	}
	out, err = Render(readSD(t, "sonarr"), RenderOptions{NoImageAutomation: true})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out[0].Data), "$imagepolicy") {
		t.Fatal("marker written with NoImageAutomation")
	}
}

func TestRenderedFilesAreValidYAML(t *testing.T) {
	c, err := LoadDir(filesys.MakeFsOnDisk(), fixture)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range c.ServiceNames() {
		out, err := Render(c.Services[name], RenderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range out {
			for _, doc := range strings.Split(string(f.Data), "\n---\n") {
				n, err := kyaml.Parse(doc)
				if err != nil {
					t.Fatalf("%s: %v", f.File, err)
				}
				if n.GetKind() == "" || n.GetName() == "" {
					t.Fatalf("%s: document without kind or name:\n%s", f.File, doc)
				}
			}
		}
	}
}

func TestLoadFixture(t *testing.T) {
	c, err := LoadDir(filesys.MakeFsOnDisk(), fixture)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(c.Services); got != 12 {
		t.Errorf("%d services, want 12", got)
	}
	if len(c.Units) != 1 || c.Units[0].Name != "gitea-actions" || c.Units[0].Anchor != "gitea" || !c.Units[0].Above {
		t.Errorf("units %+v", c.Units)
	}
	w, err := c.Waves()
	if err != nil {
		t.Fatal(err)
	}
	if wv, _ := w.Wave("keycloak"); wv != 1 {
		t.Errorf("keycloak in wave %d, want 1 (its database is implied)", wv)
	}
}

func TestValidationErrors(t *testing.T) {
	base := func() *ServiceDefinition {
		return &ServiceDefinition{APIVersion: APIVersion, Kind: KindServiceDefinition, Name: "svc",
			Image: Image{Repository: "r", Tag: "1"}, Ports: []Port{{Name: "http", ContainerPort: 80}}}
	}
	cases := map[string]struct {
		mutate func(*ServiceDefinition)
		want   string
	}{
		"bad name":       {func(s *ServiceDefinition) { s.Name = "Sonarr_1" }, `name "Sonarr_1"`},
		"no image":       {func(s *ServiceDefinition) { s.Image = Image{} }, "image: repository and tag are required"},
		"port range":     {func(s *ServiceDefinition) { s.Ports[0].ContainerPort = 70000 }, "outside 1-65535"},
		"self edge":      {func(s *ServiceDefinition) { s.Dependencies = []Dependency{{To: "svc"}} }, "depends on itself"},
		"duplicate edge": {func(s *ServiceDefinition) { s.Dependencies = []Dependency{{To: "a"}, {To: "a"}} }, "listed twice"},
		"ingress port":   {func(s *ServiceDefinition) { s.Ingress = &Ingress{Host: "h", Port: "web"} }, `port "web" is not one of`},
		"storage size":   {func(s *ServiceDefinition) { s.Storage = []Volume{{Name: "d", Size: "lots", MountPath: "/d"}} }, `size "lots"`},
		"db size":        {func(s *ServiceDefinition) { s.Database = &Database{} }, "database: size"},
		"env name":       {func(s *ServiceDefinition) { s.Env = []EnvVar{{Name: "1X"}} }, `env "1X"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := base()
			tc.mutate(s)
			err := s.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to mention %q", err, tc.want)
			}
		})
	}
	if err := base().Validate(); err != nil {
		t.Fatalf("valid definition rejected: %v", err)
	}
}

func TestLoadDirRejectsBadFiles(t *testing.T) {
	cases := map[string]struct{ file, want string }{
		"unknown field": {"apiVersion: " + APIVersion + "\nkind: ServiceDefinition\nname: a\nimage: {repository: r, tag: \"1\"}\ndepends: [b]\n", `unknown field "depends"`},
		"wrong kind":    {"apiVersion: " + APIVersion + "\nkind: Service\nname: a\n", `kind "Service"`},
		"wrong version": {"apiVersion: v1\nkind: ServiceDefinition\nname: a\n", `apiVersion "v1"`},
		"unit anchor":   {"apiVersion: " + APIVersion + "\nkind: ExtraUnits\nunits:\n- name: u\n  files: [u.yaml]\n", "anchor is required"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			fs := filesys.MakeFsInMemory()
			if err := fs.WriteFile("/c/a.yaml", []byte(tc.file)); err != nil {
				t.Fatal(err)
			}
			_, err := LoadDir(fs, "/c")
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "a.yaml") {
				t.Fatalf("error %v, want it to name a.yaml and mention %q", err, tc.want)
			}
		})
	}
}

func TestDuplicateServiceAcrossFiles(t *testing.T) {
	fs := filesys.MakeFsInMemory()
	doc := []byte("apiVersion: " + APIVersion + "\nkind: ServiceDefinition\nname: a\nimage: {repository: r, tag: \"1\"}\n")
	_ = fs.WriteFile("/c/a.yaml", doc)
	_ = fs.WriteFile("/c/b.yaml", doc)
	if _, err := LoadDir(fs, "/c"); err == nil || !strings.Contains(err.Error(), "already defined") {
		t.Fatalf("error %v, want duplicate service", err)
	}
}

func TestMultiDocumentFile(t *testing.T) {
	fs := filesys.MakeFsInMemory()
	data := "# the media stack\n---\napiVersion: " + APIVersion + "\nkind: ServiceDefinition\nname: a\nimage: {repository: r, tag: \"1\"}\n" +
		"---\napiVersion: " + APIVersion + "\nkind: ExtraUnits\nunits:\n- name: u\n  files: [u.yaml]\n  anchor: a\n  above: true\n"
	if err := fs.WriteFile("/c/stack.yaml", []byte(data)); err != nil {
		t.Fatal(err)
	}
	c, err := LoadDir(fs, "/c")
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Waves()
	if err != nil {
		t.Fatal(err)
	}
	if wv, _ := w.Wave("u"); wv != 1 || c.Services["a"] == nil {
		t.Fatalf("u in wave %d, services %v", wv, c.ServiceNames())
	}
}
