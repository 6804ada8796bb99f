package charts_test

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

const schemaFile = "siteops/values.schema.json"

// flagSchema is the JSON schema of one flag value: its type, or null for "not passed".
func flagSchema(f *pflag.Flag) map[string]any {
	var s map[string]any
	switch f.Value.Type() {
	case "bool":
		s = map[string]any{"type": []string{"boolean", "null"}}
	case "int", "int32", "int64", "uint", "uint32", "uint64":
		s = map[string]any{"type": []string{"integer", "null"}}
	case "stringSlice", "stringArray":
		// A list, or one comma-separated string as on the command line.
		s = map[string]any{"type": []string{"array", "string", "null"}, "items": map[string]any{"type": "string"}}
	case "duration":
		s = map[string]any{"type": []string{"string", "null"}, "pattern": `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$|^0$`}
	default:
		s = map[string]any{"type": []string{"string", "null"}}
	}
	s["description"] = f.Usage
	return s
}

func secretRefSchema(desc string) map[string]any {
	return map[string]any{
		"type": "object", "description": desc, "additionalProperties": false,
		"properties": map[string]any{
			"name": map[string]any{"type": "string", "description": "Secret in the release namespace; empty: not set"},
			"key":  map[string]any{"type": "string", "minLength": 1},
		},
	}
}

// valuesSchema builds the chart's values.schema.json: the flags map closed to the manager's real
// flags (a misspelt flag fails at helm install, not in a crash-looping pod) and typed like them.
func valuesSchema() map[string]any {
	fs, _ := managerFlags()
	flags := map[string]any{}
	fs.VisitAll(func(f *pflag.Flag) {
		if _, secret := secretFlags[f.Name]; !secret {
			flags[f.Name] = flagSchema(f)
		}
	})
	obj := func() map[string]any { return map[string]any{"type": "object"} }
	return map[string]any{
		"title": "siteops chart values",
		"type":  "object",
		"properties": map[string]any{
			"replicaCount": map[string]any{"type": "integer", "minimum": 1},
			// A shard's name becomes a label value and part of its Deployment's and Lease's names.
			"shards": map[string]any{"type": "array", "uniqueItems": true, "items": map[string]any{
				"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 30,
			}},
			"image": map[string]any{"type": "object", "properties": map[string]any{
				"repository": map[string]any{"type": "string", "minLength": 1},
				"tag":        map[string]any{"type": "string"},
				"pullPolicy": map[string]any{"enum": []string{"Always", "IfNotPresent", "Never"}},
			}},
			"serviceAccount": map[string]any{"type": "object", "properties": map[string]any{
				"create": map[string]any{"type": "boolean"}, "name": map[string]any{"type": "string"}, "annotations": obj(),
			}},
			"podDisruptionBudget": map[string]any{"type": "object", "properties": map[string]any{
				"enabled": map[string]any{"type": "boolean"}, "minAvailable": map[string]any{"type": []string{"integer", "string"}},
			}},
			"secrets": map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
				"githubToken":            secretRefSchema("GITHUB_TOKEN"),
				"valkeyAdminPassword":    secretRefSchema("VALKEY_ADMIN_PASSWORD"),
				"valkeySentinelPassword": secretRefSchema("VALKEY_SENTINEL_PASSWORD"),
				"redisPassword":          secretRefSchema("REDIS_PASSWORD"),
				"redisSentinelPassword":  secretRefSchema("REDIS_SENTINEL_PASSWORD"),
				"pushWebhookSecret":      secretRefSchema("PUSH_WEBHOOK_SECRET"),
				"githubAppPrivateKey":    secretRefSchema("the GitHub App's private key, mounted for --github-app-private-key-file"),
				"s3Credentials": map[string]any{
					"type": "object", "description": "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", "additionalProperties": false,
					"properties": map[string]any{
						"name":               map[string]any{"type": "string"},
						"accessKeyIDKey":     map[string]any{"type": "string", "minLength": 1},
						"secretAccessKeyKey": map[string]any{"type": "string", "minLength": 1},
					},
				},
			}},
			"audit": map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
				"service": map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
					"type":     map[string]any{"enum": []string{"ClusterIP", "NodePort"}},
					"port":     map[string]any{"type": "integer", "minimum": 1, "maximum": 65535},
					"nodePort": map[string]any{"type": []string{"integer", "null"}, "minimum": 1, "maximum": 65535},
				}},
				"certificates":   map[string]any{"enum": []string{"", "cert-manager", "self-signed"}},
				"dnsNames":       map[string]any{"type": "array", "items": map[string]any{"type": "string", "minLength": 1}},
				"ipAddresses":    map[string]any{"type": "array", "items": map[string]any{"type": "string", "minLength": 1}},
				"certManager":    map[string]any{"type": "object", "properties": map[string]any{"issuerRef": obj(), "duration": map[string]any{"type": "string"}, "renewBefore": map[string]any{"type": "string"}}},
				"selfSignedDays": map[string]any{"type": "integer", "minimum": 1},
			}},
			"ui": map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
				"enabled":       map[string]any{"type": "boolean"},
				"port":          map[string]any{"type": "integer", "minimum": 1, "maximum": 65535},
				"certSecret":    map[string]any{"type": "string", "description": "kubernetes.io/tls Secret with the UI's serving certificate; required with enabled"},
				"proxyCASecret": map[string]any{"type": "string", "description": "Secret whose ca.crt is the CA of the proxy's client certificate; required with enabled"},
				"proxyNames":    map[string]any{"type": "array", "items": map[string]any{"type": "string", "minLength": 1}},
				"oidc": map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
					"issuerURL":      map[string]any{"type": "string", "pattern": "^(https://.+)?$", "description": "the OpenID Connect issuer people sign in with; empty: none"},
					"clientID":       map[string]any{"type": "string"},
					"redirectURL":    map[string]any{"type": "string", "pattern": "^(https://.+/auth/callback)?$"},
					"secret":         map[string]any{"type": "string", "description": "Secret with the keys client-secret and cookie-secret; required with issuerURL"},
					"usernameClaim":  map[string]any{"type": "string", "minLength": 1},
					"groupsClaim":    map[string]any{"type": "string", "minLength": 1},
					"usernamePrefix": map[string]any{"type": "string"},
					"groupsPrefix":   map[string]any{"type": "string"},
				}},
				"service": map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
					"type": map[string]any{"enum": []string{"ClusterIP", "NodePort", "LoadBalancer"}},
					"port": map[string]any{"type": "integer", "minimum": 1, "maximum": 65535},
				}},
				"ingress": map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
					"enabled":     map[string]any{"type": "boolean"},
					"className":   map[string]any{"type": "string"},
					"annotations": obj(),
					"host":        map[string]any{"type": "string"},
					"tls":         map[string]any{"type": "array"},
				}},
			}},
			"flags": map[string]any{
				"type": "object", "additionalProperties": false, "properties": flags,
				"description": "every siteops-manager flag by name; null: not passed",
			},
			"extraArgs": map[string]any{
				"type": "array", "description": "arguments after the flags (the log flags); never a credential",
				"items": map[string]any{"type": "string", "not": map[string]any{"pattern": "^--?(" + strings.Join(slices.Sorted(maps.Keys(secretFlags)), "|") + ")(=|$)"}},
			},
		},
	}
}

// TestValuesSchemaCurrent fails when values.schema.json is not the one the manager's flags
// give; `go test ./charts -run TestValuesSchemaCurrent -update` rewrites it.
func TestValuesSchemaCurrent(t *testing.T) {
	want, err := json.MarshalIndent(valuesSchema(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	have, _ := os.ReadFile(filepath.FromSlash(schemaFile))
	if bytes.Equal(have, want) {
		return
	}
	if *update {
		if err := os.WriteFile(filepath.FromSlash(schemaFile), want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s is out of date with the manager's flags: run go test ./charts -run TestValuesSchemaCurrent -update", schemaFile)
}

// TestValuesSchemaRejects checks that Helm refuses values the manager would refuse.
func TestValuesSchemaRejects(t *testing.T) {
	for name, doc := range map[string]string{
		"misspelt flag":       "flags: {leader-elektion: true}",
		"wrong type":          "flags: {webhook-port: high}",
		"bad duration":        "flags: {notify-timeout: five minutes}",
		"password as a value": "flags: {redis-password: hunter2}",
		"password as an arg":  "extraArgs: [--valkey-admin-password=hunter2]",
		"unknown secret":      "secrets: {awsKey: {name: x}}",
		"shard not a label":   "shards: [Shard_1]",
		"shard twice":         "shards: [a, a]",
		"misspelt ui value":   "ui: {enabled: true, proxyCA: ca}",
	} {
		t.Run(name, func(t *testing.T) {
			install := newInstall("siteops", namespace)
			_, err := install.Run(loadChart(t), values(t, doc))
			if err == nil || !strings.Contains(err.Error(), "schema") {
				t.Errorf("helm accepted %s (%v), want a schema error", doc, err)
			}
		})
	}
}

// TestExtraArgsFollowTheFlags: the log flags, which are no chart values, reach the manager
// through extraArgs, after every flag.
func TestExtraArgsFollowTheFlags(t *testing.T) {
	d := render(t, "siteops", namespace, values(t, "extraArgs: [--zap-log-level=debug, --zap-encoder=console]")).deployment(t)
	args := d.Spec.Template.Spec.Containers[0].Args
	if n := len(args); n < 3 || args[n-2] != "--zap-log-level=debug" || args[n-1] != "--zap-encoder=console" {
		t.Fatalf("manager args end with %q, want the extra args last", args[max(0, len(args)-3):])
	}
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--controllers=") }) {
		t.Errorf("the flags are gone from the args: %q", args)
	}
}
