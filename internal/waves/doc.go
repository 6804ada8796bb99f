// Package waves plans the delivery of a service catalog as dependency-ordered Flux Kustomization
// waves, and lints a repository's wave layout and cut-over safety.
package waves
