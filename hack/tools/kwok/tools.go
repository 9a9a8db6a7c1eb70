//go:build tools

// Package tools pins the upstream command this directory builds; it is never compiled.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
