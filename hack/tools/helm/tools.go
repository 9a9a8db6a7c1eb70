//go:build tools

// Package tools pins the upstream command this directory builds; it is never compiled.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
