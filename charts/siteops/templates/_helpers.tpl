{{/* Name of the chart, overridable. */}}
{{- define "siteops.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: the release name, prefixed with the chart name unless it already contains it. */}}
{{- define "siteops.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "siteops.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: siteops
{{ include "siteops.selectorLabels" . }}
{{- end -}}

{{/* Labels of the manager pods; the Services and the PodDisruptionBudget select on these. */}}
{{- define "siteops.selectorLabels" -}}
app.kubernetes.io/name: {{ include "siteops.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: manager
{{- end -}}

{{/* Labels of every manager pod of the release, main instance and shards: the metrics Service
selects on these. */}}
{{- define "siteops.releaseSelectorLabels" -}}
app.kubernetes.io/name: {{ include "siteops.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of one instance's pods (dict "root" . "shard" name; "" is the main instance). A
shard's pods are another component, so the main instance's Deployment, Services and
PodDisruptionBudget never select them. */}}
{{- define "siteops.instanceSelectorLabels" -}}
{{- if .shard -}}
{{ include "siteops.releaseSelectorLabels" .root }}
app.kubernetes.io/component: manager-shard
siteops.dev/shard: {{ .shard }}
{{- else -}}
{{ include "siteops.selectorLabels" .root }}
{{- end -}}
{{- end -}}

{{/* One instance's flags (dict "root" . "shard" name): a shard reconciles the objects labelled
with its name and elects its leader on its own Lease, and serves no web UI; beside shards, the
main instance takes the objects without the label. */}}
{{- define "siteops.instanceFlags" -}}
{{- $flags := include "siteops.flags" .root | fromJson -}}
{{- if .shard -}}
{{- $_ := set $flags "watch-label-selector" (printf "sharding.siteops.dev/key=%s" .shard) -}}
{{- $_ := set $flags "shard-name" .shard -}}
{{- $_ := set $flags "leader-election-id" (printf "%s.%s" .shard (index $flags "leader-election-id")) -}}
{{- range $name := concat (list "ui-bind-address" "ui-cert-dir" "ui-proxy-ca-file" "ui-proxy-names") (include "siteops.uiOIDCFlags" .root | fromJsonArray) -}}
{{- $_ := unset $flags $name -}}
{{- end -}}
{{- else if and .root.Values.shards (not (index $flags "watch-label-selector")) -}}
{{- $_ := set $flags "watch-label-selector" "!sharding.siteops.dev/key" -}}
{{- end -}}
{{- toJson $flags -}}
{{- end -}}

{{- define "siteops.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (printf "%s-manager" (include "siteops.fullname" .)) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "siteops.webhookService" -}}
{{- printf "%s-webhook-service" (include "siteops.fullname" .) -}}
{{- end -}}

{{/* The enabled parts, from flags.controllers (a list or a comma-separated string), as JSON. */}}
{{- define "siteops.controllers" -}}
{{- $c := index .Values.flags "controllers" -}}
{{- if kindIs "string" $c -}}{{- $c = splitList "," $c -}}{{- end -}}
{{- $out := list -}}
{{- range $c -}}{{- $out = append $out (trim .) -}}{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* "true" when part . (a dict with part and root) is enabled. */}}
{{- define "siteops.enabled" -}}
{{- if has .part (include "siteops.controllers" .root | fromJsonArray) -}}true{{- end -}}
{{- end -}}

{{/* "true" when the Decofile admission webhooks are served: the decofile part runs with injection. */}}
{{- define "siteops.decofileWebhooks" -}}
{{- if and (include "siteops.enabled" (dict "part" "decofile" "root" .)) (not (index .Values.flags "decofile-disable-injection")) -}}true{{- end -}}
{{- end -}}

{{/* "true" when the mirror's CommitRequest webhook is served: the mirror part runs with it. */}}
{{- define "siteops.mirrorWebhooks" -}}
{{- if and (include "siteops.enabled" (dict "part" "mirror" "root" .)) (index .Values.flags "commitrequest-webhook") -}}true{{- end -}}
{{- end -}}

{{/* "true" when the mirror's WatchRule access webhook is served: the mirror part runs with it. */}}
{{- define "siteops.watchRuleWebhook" -}}
{{- if and (include "siteops.enabled" (dict "part" "mirror" "root" .)) (index .Values.flags "watchrule-webhook") -}}true{{- end -}}
{{- end -}}

{{/* "true" when any admission webhook is served (the webhook Service, TLS and port). */}}
{{- define "siteops.webhooks" -}}
{{- if or (include "siteops.decofileWebhooks" .) (include "siteops.mirrorWebhooks" .) (include "siteops.watchRuleWebhook" .) -}}true{{- end -}}
{{- end -}}

{{- define "siteops.selfSigned" -}}
{{- if index .Values.flags "webhook-self-signed" -}}true{{- end -}}
{{- end -}}

{{/* Names of the webhook configurations; the manager patches these names in self-signed mode. */}}
{{- define "siteops.mutatingWebhookName" -}}siteops-decofile-inject{{- end -}}
{{- define "siteops.validatingWebhookName" -}}siteops-decofile-protect{{- end -}}
{{- define "siteops.commitRequestWebhookName" -}}siteops-mirror-commitrequest{{- end -}}
{{- define "siteops.watchRuleWebhookName" -}}siteops-mirror-watchrule{{- end -}}

{{/* The port of a bind address such as ":8080" or "0.0.0.0:8080". */}}
{{- define "siteops.port" -}}
{{- regexReplaceAll "^.*:" (toString .) "" -}}
{{- end -}}

{{/* The flags with the release-dependent defaults filled in, as JSON. */}}
{{- define "siteops.flags" -}}
{{- $flags := deepCopy .Values.flags -}}
{{- $svc := include "siteops.webhookService" . -}}
{{- if kindIs "invalid" (index $flags "webhook-cert-hosts") -}}
{{- $_ := set $flags "webhook-cert-hosts" (list (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace)) -}}
{{- end -}}
{{- if and (kindIs "invalid" (index $flags "webhook-ca-secret")) (include "siteops.selfSigned" .) -}}
{{- $_ := set $flags "webhook-ca-secret" (printf "%s/%s-webhook-ca" .Release.Namespace (include "siteops.fullname" .)) -}}
{{- end -}}
{{- if and (kindIs "invalid" (index $flags "secret-hash-key-secret")) (include "siteops.enabled" (dict "part" "mirror" "root" .)) -}}
{{- $_ := set $flags "secret-hash-key-secret" (printf "%s/%s-mirror-secret-hash-key" .Release.Namespace (include "siteops.fullname" .)) -}}
{{- end -}}
{{- if and (not (index $flags "github-app-private-key-file")) .Values.secrets.githubAppPrivateKey.name -}}
{{- $_ := set $flags "github-app-private-key-file" (printf "/etc/siteops/github-app/%s" .Values.secrets.githubAppPrivateKey.key) -}}
{{- end -}}
{{- if include "siteops.auditCertificates" . -}}
{{- if not (index $flags "audit-cert-dir") -}}
{{- $_ := set $flags "audit-cert-dir" (include "siteops.auditCertDir" .) -}}
{{- end -}}
{{- if not (index $flags "audit-client-ca") -}}
{{- $_ := set $flags "audit-client-ca" (printf "%s/ca.crt" (include "siteops.auditCertDir" .)) -}}
{{- end -}}
{{- end -}}
{{- if include "siteops.ui" . -}}
{{- if not (index $flags "ui-bind-address") -}}
{{- $_ := set $flags "ui-bind-address" (printf ":%d" (int .Values.ui.port)) -}}
{{- end -}}
{{- if and (not (index $flags "ui-cert-dir")) .Values.ui.certSecret -}}
{{- $_ := set $flags "ui-cert-dir" (include "siteops.uiCertDir" .) -}}
{{- end -}}
{{- if and (not (index $flags "ui-proxy-ca-file")) .Values.ui.proxyCASecret -}}
{{- $_ := set $flags "ui-proxy-ca-file" (printf "%s/ca.crt" (include "siteops.uiProxyCADir" .)) -}}
{{- end -}}
{{- if and (kindIs "invalid" (index $flags "ui-proxy-names")) .Values.ui.proxyNames -}}
{{- $_ := set $flags "ui-proxy-names" .Values.ui.proxyNames -}}
{{- end -}}
{{- with .Values.ui.oidc -}}
{{- if .issuerURL -}}
{{- $from := dict "ui-oidc-issuer-url" .issuerURL "ui-oidc-client-id" .clientID "ui-oidc-redirect-url" .redirectURL "ui-oidc-username-claim" .usernameClaim "ui-oidc-groups-claim" .groupsClaim "ui-oidc-username-prefix" .usernamePrefix "ui-oidc-groups-prefix" .groupsPrefix -}}
{{- if .secret -}}
{{- $_ := set $from "ui-oidc-client-secret-file" (printf "%s/client-secret" (include "siteops.uiOIDCDir" $)) -}}
{{- $_ := set $from "ui-oidc-cookie-secret-file" (printf "%s/cookie-secret" (include "siteops.uiOIDCDir" $)) -}}
{{- end -}}
{{- range $name, $v := $from -}}
{{- if and (kindIs "invalid" (index $flags $name)) $v -}}
{{- $_ := set $flags $name $v -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $flags -}}
{{- end -}}

{{/* One flag value as the manager parses it: lists joined with commas, whole numbers without exponent. */}}
{{- define "siteops.flagValue" -}}
{{- if kindIs "slice" . -}}
{{- join "," . -}}
{{- else if kindIs "float64" . -}}
{{- int64 . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/* "true" when the decofile part receives push events (--push-webhook-bind-address). */}}
{{- define "siteops.pushReceiver" -}}
{{- $addr := toString (index .Values.flags "push-webhook-bind-address") -}}
{{- if and (include "siteops.enabled" (dict "part" "decofile" "root" .)) $addr (ne $addr "0") -}}true{{- end -}}
{{- end -}}

{{/* "true" when the mirror part runs its audit receiver (--author-attribution). */}}
{{- define "siteops.auditReceiver" -}}
{{- if and (include "siteops.enabled" (dict "part" "mirror" "root" .)) (index .Values.flags "author-attribution") -}}true{{- end -}}
{{- end -}}

{{/*
The mirror's ClusterRole rules narrowed to mirror.resources: the generated rule granting every
resource (apiGroups and resources "*") becomes one rule per entry with the same verbs; the other
generated rules (its own kinds, credential Secrets by name, Events, access reviews) stay.
*/}}
{{- define "siteops.mirrorRules" -}}
{{- $out := list -}}
{{- range .rules -}}
{{- if and (has "*" .apiGroups) (has "*" .resources) -}}
{{- $verbs := .verbs -}}
{{- range $i, $r := $.resources -}}
{{- if or (not (hasKey $r "apiGroup")) (not $r.resources) -}}
{{- fail (printf "mirror.resources[%d]: want {apiGroup, resources}" $i) -}}
{{- end -}}
{{- if and (has (toString $r.apiGroup) (list "" "*")) (or (has "secrets" $r.resources) (has "*" $r.resources)) -}}
{{- fail (printf "mirror.resources[%d]: Secrets are never mirrored; name the core resources to mirror instead of granting Secrets" $i) -}}
{{- end -}}
{{- $out = append $out (dict "apiGroups" (list (toString $r.apiGroup)) "resources" $r.resources "verbs" $verbs) -}}
{{- end -}}
{{- else -}}
{{- $out = append $out . -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/*
GOMEMLIMIT in bytes: 90% of resources.limits.memory (a whole number of bytes, or with the unit
k, M, G, Ki, Mi or Gi); empty without a memory limit.
*/}}
{{- define "siteops.goMemLimit" -}}
{{- $m := "" -}}
{{- with .Values.resources }}{{ with .limits }}{{ with .memory }}
{{- $m = kindIs "float64" . | ternary (printf "%.0f" .) (toString .) -}}
{{- end }}{{ end }}{{ end -}}
{{- if $m -}}
{{- $num := regexFind "^[0-9]+" $m -}}
{{- $unit := trimPrefix $num $m -}}
{{- $units := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 -}}
{{- if or (not $num) (not (hasKey $units $unit)) -}}
{{- fail (printf "resources.limits.memory %q: write a whole number with one of the units Ki, Mi, Gi, k, M, G (or none, for bytes), so the chart can set GOMEMLIMIT to 90%% of it" $m) -}}
{{- end -}}
{{- div (mul (atoi $num) (get $units $unit) 9) 10 -}}
{{- end -}}
{{- end -}}

{{/* Where the audit receiver's certificates are mounted when the chart makes them. */}}
{{- define "siteops.auditCertDir" -}}/etc/siteops/audit{{- end -}}

{{/* "true" when the chart makes the audit receiver's certificates (audit.certificates). */}}
{{- define "siteops.auditCertificates" -}}
{{- if and (include "siteops.auditReceiver" .) .Values.audit.certificates -}}true{{- end -}}
{{- end -}}

{{/* The names the audit receiver's serving certificate is for: its Service's and audit.dnsNames, as JSON. */}}
{{- define "siteops.auditDNSNames" -}}
{{- $svc := printf "%s-audit" (include "siteops.fullname" .) -}}
{{- toJson (concat (list (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace)) .Values.audit.dnsNames) -}}
{{- end -}}

{{/* "true" when the main instance serves the web UI (ui.enabled). */}}
{{- define "siteops.ui" -}}
{{- if .Values.ui.enabled -}}true{{- end -}}
{{- end -}}

{{/* Where the UI's serving certificate (ui.certSecret) and the proxy CA (ui.proxyCASecret) are mounted. */}}
{{- define "siteops.uiCertDir" -}}/etc/siteops/ui/serving{{- end -}}
{{- define "siteops.uiProxyCADir" -}}/etc/siteops/ui/proxy-ca{{- end -}}
{{- define "siteops.uiOIDCDir" -}}/etc/siteops/ui/oidc{{- end -}}

{{/* The flags of OIDC sign-in, as a JSON list: a shard passes none. */}}
{{- define "siteops.uiOIDCFlags" -}}
{{- $names := list -}}
{{- range $name, $_ := .Values.flags -}}
{{- if hasPrefix "ui-oidc-" $name -}}{{- $names = append $names $name -}}{{- end -}}
{{- end -}}
{{- toJson $names -}}
{{- end -}}

{{/* Fails on ui values the manager would refuse or that would leave the UI unreachable. */}}
{{- define "siteops.uiCheck" -}}
{{- $flags := include "siteops.flags" . | fromJson -}}
{{- $addr := toString (index $flags "ui-bind-address" | default "") -}}
{{- if not (include "siteops.ui" .) -}}
{{- if and $addr (ne $addr "0") -}}
{{- fail "flags.ui-bind-address is set but ui.enabled is false: set ui.enabled (with ui.certSecret, and ui.proxyCASecret or ui.oidc), so the chart mounts the certificates, adds the ui Service and grants the impersonation the UI needs" -}}
{{- end -}}
{{- else -}}
{{- if eq $addr "0" -}}
{{- fail "flags.ui-bind-address \"0\" turns the UI off while ui.enabled is true: leave flags.ui-bind-address null (ui.port sets it) or set ui.enabled false" -}}
{{- end -}}
{{- if not (index $flags "ui-cert-dir") -}}
{{- fail "ui.certSecret is required with ui.enabled: name the kubernetes.io/tls Secret (tls.crt, tls.key) holding the UI's serving certificate, or set flags.ui-cert-dir to a folder you mount with extraVolumes" -}}
{{- end -}}
{{- if and (not (index $flags "ui-proxy-ca-file")) (not (index $flags "ui-oidc-issuer-url")) -}}
{{- fail "ui.proxyCASecret or ui.oidc.issuerURL is required with ui.enabled: name the Secret whose ca.crt is the CA of the authenticating proxy's client certificate, or the OpenID Connect issuer people sign in with (the UI serves no one anonymously); or set flags.ui-proxy-ca-file to a file you mount with extraVolumes" -}}
{{- end -}}
{{- if index $flags "ui-oidc-issuer-url" -}}
{{- if not (hasPrefix "https://" (index $flags "ui-oidc-issuer-url")) -}}
{{- fail "ui.oidc.issuerURL must be https://…, as the API server's --oidc-issuer-url" -}}
{{- end -}}
{{- if not (index $flags "ui-oidc-client-id") -}}
{{- fail "ui.oidc.clientID is required with ui.oidc.issuerURL: the UI's client ID at the issuer" -}}
{{- end -}}
{{- if not (and (index $flags "ui-oidc-redirect-url") (hasPrefix "https://" (index $flags "ui-oidc-redirect-url")) (hasSuffix "/auth/callback" (index $flags "ui-oidc-redirect-url"))) -}}
{{- fail "ui.oidc.redirectURL is required with ui.oidc.issuerURL: https://<the host people open>/auth/callback, registered at the issuer" -}}
{{- end -}}
{{- if not (and (index $flags "ui-oidc-client-secret-file") (index $flags "ui-oidc-cookie-secret-file")) -}}
{{- fail "ui.oidc.secret is required with ui.oidc.issuerURL: name the Secret with the keys client-secret (the client's secret at the issuer) and cookie-secret (32 random bytes or more), or set flags.ui-oidc-client-secret-file and flags.ui-oidc-cookie-secret-file to files you mount with extraVolumes" -}}
{{- end -}}
{{- end -}}
{{- $port := include "siteops.port" $addr -}}
{{- $taken := dict (include "siteops.port" (index $flags "health-probe-bind-address")) "flags.health-probe-bind-address" -}}
{{- if ne (index $flags "metrics-bind-address") "0" -}}
{{- $_ := set $taken (include "siteops.port" (index $flags "metrics-bind-address")) "flags.metrics-bind-address" -}}
{{- end -}}
{{- if include "siteops.webhooks" . -}}
{{- $_ := set $taken (include "siteops.flagValue" (index $flags "webhook-port")) "flags.webhook-port" -}}
{{- end -}}
{{- if include "siteops.pushReceiver" . -}}
{{- $_ := set $taken (include "siteops.port" (index $flags "push-webhook-bind-address")) "flags.push-webhook-bind-address" -}}
{{- end -}}
{{- if include "siteops.auditReceiver" . -}}
{{- $_ := set $taken (include "siteops.port" (index $flags "audit-listen-address")) "flags.audit-listen-address" -}}
{{- end -}}
{{- with get $taken $port -}}
{{- fail (printf "ui.port %s is also the port of %s: pick another" $port .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
