package testenv

// ConfigMapAuditPolicy is an API server audit policy that logs writes to ConfigMaps with their
// responses, and nothing else: changes to other kinds (ServiceAccounts, for one) get no audit
// fact. Tests of the mirror's author attribution give it to their API server.
const ConfigMapAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: RequestResponse
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
  resources: [{group: "", resources: ["configmaps"]}]
- level: None
`
